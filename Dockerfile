# One image for sedna-gm, sedna-lc, sedna-devcluster and the simulated worker.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY proto proto
COPY shared shared
COPY gm gm
COPY lc lc
COPY devcluster devcluster
COPY charts charts
COPY examples examples
RUN pip install --no-cache-dir .
# Default: the GM; docker-compose.yml and the Helm chart pick the command per service.
EXPOSE 9000 9100
CMD ["sedna-gm", "--config", "/config/gm.yaml"]
