# syntax=docker/dockerfile:1
# One image for sedna-gm, sedna-lc, sedna-devcluster and the simulated workers of examples/workers;
# docker-compose.yml and the Helm chart pick the command per service.
#
# Stage `build` makes wheels: first the dependencies, from pyproject.toml and constraints.txt
# alone, so an edit to the sources reuses that layer; then the project's own wheel. Stage
# `runtime` installs them into a slim image (no compiler, no sources, no build tools) and runs as
# an unprivileged user. Build: docker build -t sedna-py:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY constraints.txt pyproject.toml ./
# --build-constraint needs pip >= 25.3: the pinned pip first
RUN pip install --upgrade -c constraints.txt pip
# The runtime dependencies listed in pyproject.toml, as wheels pinned by constraints.txt
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" \
      > requirements.txt \
 && pip wheel -c constraints.txt -r requirements.txt --wheel-dir /wheels/deps
COPY README.md ./
COPY proto proto
COPY shared shared
COPY gm gm
COPY lc lc
COPY devcluster devcluster
RUN pip wheel --no-deps -c constraints.txt --build-constraint constraints.txt --wheel-dir /wheels/app .

FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# 65532: the user the chart's GM pod names (runAsUser); the chart runs the LC as root on purpose
RUN groupadd --system --gid 65532 sedna \
 && useradd --system --uid 65532 --gid 65532 --home-dir /app --no-create-home --shell /usr/sbin/nologin sedna
COPY --from=build /wheels/deps /wheels/deps
RUN pip install --no-index /wheels/deps/*.whl && rm -rf /wheels/deps
COPY --from=build /wheels/app /wheels/app
RUN pip install --no-index --no-deps /wheels/app/*.whl && rm -rf /wheels/app
COPY --chmod=0755 scripts/healthcheck.py /usr/local/bin/sedna-healthcheck
WORKDIR /app
COPY examples/workers examples/workers
# The LC keeps its SQLite state under $ROOTFS_MOUNT_DIR; docker-compose.yml mounts a volume here
# (the chart mounts the host's / instead), owned by the image's user so it can write there.
RUN install -d -o sedna -g sedna /rootfs
USER 65532:65532
EXPOSE 9000 9100
# GET /healthz of the GM (port 9000, or its config's websocket.port) or of the LC (BIND_PORT,
# 9100), whichever runs; SEDNA_HEALTH_URL overrides. Kubernetes ignores it and uses the chart's probes.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 CMD ["sedna-healthcheck"]
CMD ["sedna-gm", "--config", "/config/gm.yaml"]
