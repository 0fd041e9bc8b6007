# wasmrun in a container: the wheel (which carries the built guest), its machine
# code compiled at image build, a non-root user, data in the /data volume.
#
#   make dist && docker build -t wasmrun .
#   docker run --rm -v wasmrun-data:/data wasmrun tenants add team-a    # prints the API key once
#   docker run -d --name wasmrun -p 8080:8080 -v wasmrun-data:/data wasmrun
#
# It listens on every interface, so callers need an API key (README: "In a container").
FROM python:3.11-slim

RUN useradd --create-home --uid 10001 --user-group wasmrun \
 && install -d -o wasmrun -g wasmrun -m 0700 /data

# --build-arg EXTRAS=[mcp] adds the MCP SDK (serves /mcp as well).
ARG EXTRAS=""
COPY dist/wasmrun-*-py3-none-any.whl /tmp/
RUN wheel=$(ls /tmp/wasmrun-*-py3-none-any.whl) \
 && pip install --no-cache-dir --disable-pip-version-check "${wheel}${EXTRAS}" \
 && rm "$wheel"

USER wasmrun
ENV WASMRUN_DATA_DIR=/data \
    WASMRUN_CACHE_DIR=/home/wasmrun/.cache/wasmrun \
    PYTHONUNBUFFERED=1
# Compile now, not on each container's first start (a host whose CPU lacks
# features of the build machine's compiles again at start, with progress on
# stderr); then check the image.
RUN wasmrun warm && wasmrun doctor

VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["wasmrun"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
