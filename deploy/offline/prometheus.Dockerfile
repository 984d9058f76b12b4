# Stand-in for prom/prometheus from Debian bookworm's prometheus package (2.42): the binary as entrypoint (the
# compose file passes only flags), working directory /prometheus for the TSDB, not run as root.
ARG DEBIAN_IMAGE=llm-gateway-offline/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && mkdir -p /prometheus && chown nobody:nogroup /prometheus
WORKDIR /prometheus
USER nobody
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml"]
