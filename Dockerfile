# Multi-stage build of the streamfs binary. Untested here (no Docker engine
# runs on the build machines). Run with FUSE access, e.g.:
#   docker build -t streamfs .
#   docker run --rm -it --device /dev/fuse --cap-add SYS_ADMIN \
#       -v /var/tmp/streamfs:/data streamfs \
#       sh -c 'streamfs mkfs --size 4G /data/default.img 2>/dev/null; mkdir -p /mnt/streamfs && streamfs mount /data/default.img /mnt/streamfs'
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/streamfs .

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends fuse3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/streamfs /usr/local/bin/streamfs
RUN ln -s /usr/local/bin/streamfs /sbin/mount.streamfs || true
ENTRYPOINT []
CMD ["streamfs", "help"]
