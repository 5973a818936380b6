# Sundial's images, in three stages (docs/docker.md):
#   builder  compiles the C accelerators and installs Sundial and its runtime dependencies
#            into a virtual environment, /opt/sundial (thrown away: no compiler reaches the images);
#   runtime  the broker: the base image plus /opt/sundial, run as the non-root user sundial
#            (uid 1000), data in the volume /data, a health check. The default target.
#   test     runtime plus the test dependencies, kcat and Node.js with kafkajs, and the tests:
#            the tests service of docker-compose.yml.
#
#   docker build -t sundial .
#   docker run -p 9092:9092 -v sundial-data:/data sundial
#   docker build --target test -t sundial-tests .
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
#
# BASE_IMAGE: the official Python slim image by default. Where it cannot be pulled (no
# image registry), scripts/base-image makes an equivalent from Debian packages and prints
# its name: docker build --build-arg BASE_IMAGE="$(scripts/base-image)" .
# The file is the same for both; each RUN works on either base.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
# gcc builds the optional C accelerators (sundial.records._speedups,
# sundial.storage._cleaner_speedups, sundial.storage._fsync_worker). The official image
# carries Python's headers; a Debian-built base gets them from Debian's python3.X-dev.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && if ! python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then \
      apt-get install -y --no-install-recommends "python$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev"; \
    fi \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Layers that change rarely come first, so that a code change rebuilds only the last ones.
# 1. The dependencies, read from pyproject.toml: the build's into /opt/build (builder only),
#    the broker's into /opt/sundial (a venv without pip: the base image's pip installs into it).
COPY pyproject.toml ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); d = p['project']; \
open('/tmp/build-requirements.txt', 'w').write('\n'.join(p['build-system']['requires']) + '\n'); \
open('/tmp/requirements.txt', 'w').write('\n'.join(d['dependencies']) + '\n'); \
open('/tmp/test-requirements.txt', 'w').write('\n'.join(d['optional-dependencies']['test']) + '\n')" \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --disable-pip-version-check --quiet -r /tmp/build-requirements.txt \
 && python3 -m venv --without-pip /opt/sundial \
 && /opt/build/bin/pip --python /opt/sundial/bin/python install --no-cache-dir --disable-pip-version-check --quiet \
      -r /tmp/requirements.txt
# 2. kafkajs for the test image, from the lock file with its integrity hashes (no npm: Debian's
#    pulls hundreds of packages); a failed download fails the build.
COPY tests/integration/js/package.json tests/integration/js/package-lock.json tests/integration/js/install.py \
     tests/integration/js/
RUN python3 tests/integration/js/install.py
# 3. Sundial itself, as a wheel (not editable: the image holds no source tree). Every C
#    accelerator must build here: the build fails rather than ship the Python fallbacks.
COPY . .
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --no-cache-dir --disable-pip-version-check --quiet \
      --wheel-dir /tmp/wheels . \
 && /opt/build/bin/pip --python /opt/sundial/bin/python install --no-deps --no-cache-dir --disable-pip-version-check \
      --quiet /tmp/wheels/sundial_broker-*.whl \
 && cd / && /opt/sundial/bin/python -c "import sundial.records._speedups, \
sundial.storage._cleaner_speedups, sundial.storage._fsync_worker"

FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="Sundial" \
      org.opencontainers.image.description="A Kafka-compatible broker whose speciality is time" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 1000 sundial \
 && useradd --uid 1000 --gid sundial --home-dir /data --no-create-home --shell /usr/sbin/nologin sundial \
 && mkdir /data && chown sundial:sundial /data
COPY --from=builder /opt/sundial /opt/sundial
ENV PATH=/opt/sundial/bin:$PATH
USER sundial
WORKDIR /data
VOLUME ["/data"]
EXPOSE 9092
# `docker stop` sends SIGTERM: Sundial answers the requests in flight, flushes its logs and
# writes its clean-shutdown marker, then exits 0. Give it time: `docker stop -t 30`.
STOPSIGNAL SIGTERM
# An ApiVersions round trip to the default listener (docker-compose.yml probes its own).
HEALTHCHECK --interval=10s --timeout=6s --start-period=60s --retries=3 \
  CMD ["python", "-m", "sundial.tools.healthcheck", "127.0.0.1:9092"]
CMD ["sundial", "serve", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", \
     "--override", "advertised.listeners=PLAINTEXT://127.0.0.1:9092", "--override", "log.dirs=/data"]

# A stage of its own so that the test image's Node.js and packages never reach runtime.
FROM runtime AS test
USER root
# Not a broker: the runtime image's probe of port 9092 does not apply.
HEALTHCHECK NONE
# kcat (librdkafka 2.0.2) and Node.js for kafkajs (its tree comes from the builder).
RUN apt-get update \
 && apt-get install -y --no-install-recommends kcat nodejs \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /tmp/test-requirements.txt /tmp/test-requirements.txt
RUN /usr/local/bin/python3 -m pip --python /opt/sundial/bin/python install --no-cache-dir --disable-pip-version-check --quiet \
      -r /tmp/test-requirements.txt
WORKDIR /app
# The tests and what they read of the checkout; not the package sources, so that every
# import of sundial finds the installed wheel.
COPY pyproject.toml docker-compose.yml ./
COPY benchmarks benchmarks
COPY tests tests
COPY --from=builder /src/tests/integration/js/node_modules tests/integration/js/node_modules
# /scratch: where docker-compose.yml mounts the volume for the tests' temporary directories.
RUN mkdir /scratch && chown -R sundial:sundial /app /scratch
USER sundial
CMD ["python", "-m", "pytest", "-q", "tests/integration", "-m", "not spark"]
