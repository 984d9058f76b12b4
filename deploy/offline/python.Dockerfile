# Stand-in for python:3.11-slim from Debian bookworm's own packages (Python 3.11), for hosts that reach a Debian
# mirror and PyPI but no image registry. Provides what the project's Dockerfile uses: `python` (3.11), its venv
# module and apt-get.
ARG DEBIAN_IMAGE=llm-gateway-offline/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       python3 python3-venv python-is-python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
ENV LANG=C.UTF-8
CMD ["python3"]
