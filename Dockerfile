# syntax=docker/dockerfile:1
# VisMoE server image.
#
#   docker build -t vismoe-server .
#   docker run --gpus all -v /path/to/checkpoint:/models/model:ro -p 50051:50051 -p 9464:9464 \
#     vismoe-server --model=/models/model --listen=0.0.0.0:50051 --metrics_listen=0.0.0.0:9464
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

ARG DEBIAN_IMAGE=debian:12-slim
# CUDA package suffix in NVIDIA's repository (13-0 = CUDA 13.0).
ARG CUDA_PKG=13-0
ARG CUDA_DIR=/usr/local/cuda-13.0

# ---------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS cuda-repo
# NVIDIA's apt repository for Debian 12, trusted through its keyring package.
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/cuda-keyring.deb
RUN dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb

# ---------------------------------------------------------------------------
FROM cuda-repo AS builder
ARG DEBIAN_FRONTEND=noninteractive
ARG CUDA_PKG
ARG CUDA_DIR
# GPU architectures to compile for (Ampere, Ada, Hopper by default).
ARG CUDA_ARCHITECTURES="80;86;89;90"
# Dependencies first, so source edits do not re-run apt.
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      cuda-nvcc-${CUDA_PKG} cuda-cudart-dev-${CUDA_PKG} cuda-cccl-${CUDA_PKG} \
      libcublas-dev-${CUDA_PKG} \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# VISMOE_CUDA=ON: fail the build rather than silently ship a cpu-only image.
# Tests are not built here; CI runs them (they need the source tree's fixtures).
RUN cmake -S . -B /build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DVISMOE_BUILD_TESTS=OFF \
      -DVISMOE_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=${CUDA_DIR}/bin/nvcc \
      "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
 && cmake --build /build --target vismoe-server vismoe-cli \
 && strip /build/server/vismoe-server /build/client/vismoe-cli

# ---------------------------------------------------------------------------
FROM cuda-repo AS runtime
ARG DEBIAN_FRONTEND=noninteractive
ARG CUDA_PKG
ARG CUDA_DIR
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh --runtime \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      cuda-cudart-${CUDA_PKG} libcublas-${CUDA_PKG} \
 && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && groupadd --system --gid 10001 vismoe \
 && useradd --system --uid 10001 --gid vismoe --no-create-home --shell /usr/sbin/nologin vismoe

# What the NVIDIA Container Toolkit reads to expose the GPU (same as nvidia/cuda images).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=${CUDA_DIR}/targets/x86_64-linux/lib:${CUDA_DIR}/lib64

COPY --from=builder /build/server/vismoe-server /build/client/vismoe-cli /usr/local/bin/

USER vismoe:vismoe
# 50051: gRPC (vismoe.v1 + grpc.health.v1); 9464: Prometheus /metrics.
EXPOSE 50051 9464
# Model load can take minutes: failures during the start period do not count.
# Assumes a plaintext listener; with --tls_cert the check needs --tls --tls_ca.
HEALTHCHECK --interval=30s --timeout=10s --start-period=10m --retries=3 \
  CMD ["vismoe-cli", "health", "--server=127.0.0.1:50051", "--connect_timeout=5s", "--timeout=5s"]

ENTRYPOINT ["vismoe-server"]
# Inside a container the server must listen on all interfaces (its defaults
# are loopback). Mount a checkpoint directory at /models/model.
CMD ["--model=/models/model", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464"]
