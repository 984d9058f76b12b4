# Stand-in for redis:7.4-alpine from Debian bookworm's redis-server (7.0): the same interface docker-compose.yml
# uses (`redis-server ARGS`, `redis-cli ping`, data in /data, not run as root).
ARG DEBIAN_IMAGE=llm-gateway-offline/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && mkdir -p /data && chown redis:redis /data
# A named volume mounted at /data starts with this directory's owner, so redis can write its AOF there.
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]
