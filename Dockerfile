# Sundial broker image; the same image runs the integration tests (docker-compose.yml).
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends kcat nodejs npm gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . .
# gcc builds the optional C accelerator (records._speedups); without it the record walks fall back to Python.
RUN pip install --no-cache-dir --config-settings editable_mode=compat -e '.[test]' \
 && (cd tests/integration/js && npm install --no-audit --no-fund || true)
EXPOSE 9092
VOLUME ["/data"]
CMD ["sundial", "serve", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", "--override", "log.dirs=/data"]
