# syntax=docker/dockerfile:1
# The table pipeline in a container: runs `qptables build` directly and serves as the dask
# scheduler and worker image of cluster/ (docker-compose, Kubernetes). From the repository root:
#
#   docker build -t quantile-propagation:0.1.0 .
#   docker run --rm -v "$PWD/tables:/tables" quantile-propagation:0.1.0 \
#       qptables build probit /tables/probit-small.zarr --mu -10 10 0.01 --log10-sigma -1 1 0.01
#
# The base image is pinned to an exact tag (Python 3.11.13, Debian bookworm). To pin its digest
# too, look it up with `docker buildx imagetools inspect python:3.11.13-slim-bookworm` and build
# with --build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest>.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---- build stage: a virtualenv with the project and the [cluster] extra ------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first, in their own layer that is rebuilt only when pyproject.toml changes: install
# the project with empty packages (which pulls in every dependency), then drop it again.
COPY pyproject.toml README.md ./
RUN mkdir qpinfer qptables \
 && touch qpinfer/__init__.py qptables/__init__.py \
 && pip install ".[cluster]" \
 && pip uninstall -y quantile-propagation \
 && rm -rf qpinfer qptables build *.egg-info
# Then the sources, without touching the dependency layer.
COPY qpinfer ./qpinfer
COPY qptables ./qptables
RUN pip install --no-deps . \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} + \
 && python -c "import qpinfer, qptables, distributed, bokeh; print('ok', qpinfer.__version__)"

# ---- runtime stage: the virtualenv only, a non-root user --------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="quantile-propagation" \
      org.opencontainers.image.description="qptables sigma* table pipeline (dask) and qpinfer" \
      org.opencontainers.image.licenses="BSD-3-Clause"
ARG UID=10001
RUN groupadd --gid "${UID}" qp \
 && useradd --uid "${UID}" --gid qp --create-home --shell /usr/sbin/nologin qp \
 && mkdir /tables \
 && chown qp:qp /tables
COPY --from=build /opt/venv /opt/venv
# One thread per worker process: the sigma* kernel is vectorized numpy, and dask runs one
# single-threaded worker per core (cluster/ starts workers with --nthreads 1).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    OPENBLAS_NUM_THREADS=1 \
    NUMEXPR_NUM_THREADS=1 \
    QPINFER_TABLES=/tables/installed
USER qp
WORKDIR /tables
# 8786: dask scheduler, 8787: dashboard
EXPOSE 8786 8787
CMD ["qptables", "--help"]
