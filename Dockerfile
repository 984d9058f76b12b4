# One image for every role in docker-compose.yml: the gateway (`llm-gateway serve`) and engine replicas
# (`llm-gateway engine`). Two stages: `build` has a C compiler and makes the engine's C kernels (one library per
# x86-64 level) and the embedder's ONNX graphs; the runtime stage copies them and the virtualenv, with no
# compiler and none of the packages only tests or GPUs use (deploy/image_requirements.py says which).
# CPU torch by default; for CUDA: --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124 (and triton
# back, see deploy/README.md). Offline (no registry, a local wheel mirror): deploy/README.md, deploy/smoke.sh.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# pip's own settings, passed through for a mirror or local wheels (used in this stage only, never kept)
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_TRUSTED_HOST
# PEM text of extra CAs to trust while building (a TLS-inspecting proxy's): this stage only, never kept
ARG CA_CERTS
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PATH=/opt/venv/bin:$PATH
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && if [ -n "$CA_CERTS" ]; then printf '%s\n' "$CA_CERTS" > /usr/local/share/ca-certificates/build-extra.crt \
         && update-ca-certificates; fi \
    && python -m venv /opt/venv
# torch first, in its own layer: it is the largest and changes least
# --no-compile: bytecode is written by deploy/image_check.py for the modules that run (not all of them)
RUN pip install --no-compile ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} torch==2.13.0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/image_requirements.py deploy/image_check.py ./deploy/
RUN pip install --no-compile --no-deps $(python deploy/image_requirements.py nodeps) \
    && python deploy/image_requirements.py deps > /tmp/requirements.txt \
    && pip install --no-compile -r /tmp/requirements.txt
COPY gateway ./gateway
COPY engine ./engine
RUN pip install --no-compile --no-deps . \
    && cd / && python /src/deploy/image_check.py /opt/llm-gateway
# What no role runs: torch's C++ headers, test binaries and test suites, other packages' tests and test data,
# the Hub's download accelerator (the image runs offline), pip (the runtime user cannot install into /opt/venv;
# `python -m ensurepip` brings it back). The project's own modules all get bytecode.
RUN cd /opt/venv/lib/python3.11/site-packages \
    && rm -rf torch/include torch/test torch/share/cmake numpy/*/tests onnx/backend/test/data sympy/*/tests hf_xet \
    && python -m compileall -q gateway engine \
    && find torch/bin -type f ! -name torch_shm_manager -delete \
    && python -m pip uninstall -y -q pip

FROM ${BASE_IMAGE}
# libgomp: the C kernels' OpenMP runtime (torch bundles its own under another name)
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && useradd --create-home --uid 1000 gateway
ENV PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    PATH=/opt/venv/bin:$PATH \
    ENGINE_KERNELS_DIR=/opt/llm-gateway/kernels \
    LLM_GATEWAY_EMBED_CACHE=/opt/llm-gateway/embed
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/llm-gateway /opt/llm-gateway
WORKDIR /app
COPY policies ./policies
USER gateway
EXPOSE 8080 8001
CMD ["llm-gateway", "serve", "--host", "0.0.0.0", "--port", "8080"]
