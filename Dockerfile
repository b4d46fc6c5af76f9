# syntax=docker/dockerfile:1
# VisMoE server image, two variants from one file (build argument VARIANT):
#
#   VARIANT=cuda (default): CUDA + CPU backends; needs NVIDIA's Debian 12 apt repository.
#     docker build -t vismoe-server .
#     docker run --gpus all -v /path/to/checkpoint:/models/model:ro -p 50051:50051 -p 8000:8000 -p 9464:9464 vismoe-server
#   VARIANT=debian: CPU backend only, every package from Debian 12 (no NVIDIA repository).
#     docker build --build-arg VARIANT=debian -t vismoe-server:cpu .
#     (podman, as tests/container/container_test.sh does, works the same.)
#
# Why Debian 12 in both stages and not nvidia/cuda:*: every library dependency
# comes from Debian 12 (bookworm) packages through deploy/install-deps.sh (gRPC
# 1.51, protobuf 3.21, abseil 20220623, prometheus-cpp 1.0.1, OpenCV 4.6).
# The nvidia/cuda images are Ubuntu/UBI based, where those packages have other
# versions and sonames, so the binary built here would not load there. The CUDA
# toolkit instead comes from NVIDIA's own Debian 12 apt repository: nvcc +
# cuBLAS headers in the builder, only the cudart/cuBLAS runtime libraries in the
# final image. The GPU driver (libcuda.so.1) is not in the image: the NVIDIA
# Container Toolkit mounts the host's at run time (`--gpus`, compose device
# reservation, or the Kubernetes device plugin), as for nvidia/cuda images.
# Without a GPU the server falls back to its cpu backend.
#
# Both variants run the same instructions; only shell `if`s on VARIANT differ,
# so every builder (BuildKit, the legacy builder, podman/buildah 4.x) builds
# either one without stage-selection tricks, and the debian variant never
# reaches NVIDIA's servers.

ARG DEBIAN_IMAGE=debian:12-slim
# cuda: CUDA + CPU backends (NVIDIA's repository); debian: CPU backend, Debian packages only.
ARG VARIANT=cuda
# CUDA package suffix in NVIDIA's repository (13-0 = CUDA 13.0).
ARG CUDA_PKG=13-0
ARG CUDA_DIR=/usr/local/cuda-13.0
# NVIDIA's apt repository for Debian 12 is trusted through this keyring package.
ARG CUDA_KEYRING_URL=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb

# ---------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS builder
ARG DEBIAN_FRONTEND=noninteractive
ARG VARIANT
ARG CUDA_PKG
ARG CUDA_DIR
ARG CUDA_KEYRING_URL
# GPU architectures to compile for (Ampere, Ada, Hopper by default).
ARG CUDA_ARCHITECTURES="80;86;89;90"
# Dependencies first, so source edits do not re-run apt. cuda: the keyring
# package (kept in /opt/vismoe-apt for the runtime stage; the directory stays
# empty for debian), then nvcc + cuBLAS headers.
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh \
 && mkdir -p /opt/vismoe-apt \
 && case "$VARIANT" in \
      cuda) curl -fsSL -o /opt/vismoe-apt/cuda-keyring.deb "$CUDA_KEYRING_URL" \
            && dpkg -i /opt/vismoe-apt/cuda-keyring.deb \
            && apt-get update -qq \
            && apt-get install -y -qq --no-install-recommends \
                 cuda-nvcc-${CUDA_PKG} cuda-cudart-dev-${CUDA_PKG} cuda-cccl-${CUDA_PKG} \
                 libcublas-dev-${CUDA_PKG} ;; \
      debian) ;; \
      *) echo "VARIANT must be cuda or debian, not '$VARIANT'" >&2; exit 1 ;; \
    esac \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# VISMOE_CUDA=ON: fail the build rather than silently ship a cpu-only image;
# OFF for the debian variant (there is no nvcc to find).
# Tests are not built here (tests/ is not even in the build context, see
# .dockerignore); CI runs them.
RUN if [ "$VARIANT" = cuda ]; then \
      set -- -DVISMOE_CUDA=ON -DCMAKE_CUDA_COMPILER=${CUDA_DIR}/bin/nvcc \
             "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}"; \
    else \
      set -- -DVISMOE_CUDA=OFF; \
    fi \
 && cmake -S . -B /build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DVISMOE_BUILD_TESTS=OFF \
      "$@" \
 && cmake --build /build --target vismoe-server vismoe-cli \
 && strip /build/server/vismoe-server /build/client/vismoe-cli

# ---------------------------------------------------------------------------
# No compiler, headers, sources or build tree here: only the two binaries and
# the shared libraries they load.
FROM ${DEBIAN_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
ARG VARIANT
ARG CUDA_PKG
ARG CUDA_DIR
COPY deploy/install-deps.sh /tmp/install-deps.sh
COPY --from=builder /opt/vismoe-apt/ /tmp/vismoe-apt/
RUN /tmp/install-deps.sh --runtime \
 && if [ "$VARIANT" = cuda ]; then \
      dpkg -i /tmp/vismoe-apt/cuda-keyring.deb \
      && apt-get update -qq \
      && apt-get install -y -qq --no-install-recommends \
           cuda-cudart-${CUDA_PKG} libcublas-${CUDA_PKG}; \
    fi \
 && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh /tmp/vismoe-apt \
 && groupadd --system --gid 10001 vismoe \
 && useradd --system --uid 10001 --gid vismoe --no-create-home --shell /usr/sbin/nologin vismoe

# What the NVIDIA Container Toolkit reads to expose the GPU (same as nvidia/cuda
# images). Unused in the debian variant, which has no CUDA code to use a GPU.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=${CUDA_DIR}/targets/x86_64-linux/lib:${CUDA_DIR}/lib64

COPY --from=builder /build/server/vismoe-server /build/client/vismoe-cli /usr/local/bin/

USER vismoe:vismoe
# 50051: gRPC (vismoe.v1 + grpc.health.v1); 8000: the OpenAI-compatible HTTP
# API; 9464: Prometheus /metrics.
EXPOSE 50051 8000 9464
# Model load can take minutes: failures during the start period do not count.
# Assumes a plaintext listener; with --tls_cert the check needs --tls --tls_ca.
HEALTHCHECK --interval=30s --timeout=10s --start-period=10m --retries=3 \
  CMD ["vismoe-cli", "health", "--server=127.0.0.1:50051", "--connect_timeout=5s", "--timeout=5s"]

ENTRYPOINT ["vismoe-server"]
# Inside a container the server must listen on all interfaces (its defaults
# are loopback). Mount a checkpoint directory at /models/model.
CMD ["--model=/models/model", "--listen=0.0.0.0:50051", "--http_listen=0.0.0.0:8000", "--metrics_listen=0.0.0.0:9464"]
