# Sundial broker image; the same image runs the integration tests (docker-compose.yml).
#
#   docker build -t sundial .
#   docker run -p 9092:9092 -v sundial-data:/data sundial
#
# The default command listens on 0.0.0.0:9092 inside the container and advertises
# 127.0.0.1:9092: right for clients on the host through `-p 9092:9092`. Clients in other
# containers need the broker to advertise a name they can reach: give the command
# yourself (docker-compose.yml shows two listeners, one for each kind of client):
#
#   docker run sundial sundial serve --override listeners=PLAINTEXT://0.0.0.0:9092 \
#       --override advertised.listeners=PLAINTEXT://sundial.example.com:9092 --override log.dirs=/data
#
# Sundial refuses to start when the host it would advertise is 0.0.0.0 or ::.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends kcat nodejs npm gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app

# Layers that change rarely come first, so that a code change rebuilds only the last two.
# 1. The Python dependencies, read from pyproject.toml (the broker's and the tests').
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); d = p['project']; \
print('\n'.join(p['build-system']['requires'] + d['dependencies'] + d['optional-dependencies']['test']))" \
    > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt
# 2. kafkajs for the Node.js client tests.
COPY tests/integration/js/package.json tests/integration/js/package-lock.json tests/integration/js/
RUN cd tests/integration/js && (npm ci --no-audit --no-fund || true)
# 3. The code. gcc builds the optional C accelerators (records._speedups, records._lz4,
#    storage._cleaner_speedups, storage._fsync_worker); without them the record walks, the log
#    cleaner and the fsync threads fall back to Python, and lz4 decoding to cramjam.
COPY . .
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e .

EXPOSE 9092
VOLUME ["/data"]
CMD ["sundial", "serve", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", \
     "--override", "advertised.listeners=PLAINTEXT://127.0.0.1:9092", "--override", "log.dirs=/data"]
