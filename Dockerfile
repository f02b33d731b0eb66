# syntax=docker/dockerfile:1
#
# The scaler image: `docker build -t vllm-keda-scaler:0.1.0 .`
# Build stage: the Rust toolchain compiles the release binary. The protocol is compiled by build.rs
# with a pure-Rust protobuf compiler, so no protoc is needed here.
# Runtime stage: Debian slim (same Debian release as the builder, so glibc matches), running as the
# unprivileged uid/gid 65532. It keeps /bin/sh on purpose: the vLLM example runs
# `vllm-keda-scaler warmup` from this image in a small shell loop beside the vLLM container.

ARG DEBIAN_RELEASE=bookworm

FROM rust:1-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
# The whole workspace (Cargo.toml, Cargo.lock, src/, crates/ with the service's build.rs and proto/,
# data/ for the bundled traces); .dockerignore keeps target/, .git and other large outputs out of the context.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin vllm-keda-scaler \
    && install -D -m 0755 target/release/vllm-keda-scaler /out/vllm-keda-scaler

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
COPY --from=build /out/vllm-keda-scaler /usr/local/bin/vllm-keda-scaler
USER 65532:65532
# gRPC (KEDA external-scaler protocol) and HTTP (/livez, /readyz, /metrics, /debug).
EXPOSE 9090 8080
ENV VLLM_KEDA_SCALER_GRPC_ADDR=0.0.0.0:9090 \
    VLLM_KEDA_SCALER_HTTP_ADDR=0.0.0.0:8080
ENTRYPOINT ["/usr/local/bin/vllm-keda-scaler"]
CMD ["serve"]
