# Multi-stage build of the streamfs binary. Untested here (no Docker engine
# runs on the build machines). Run with FUSE access, e.g.:
#   docker build -t streamfs .
#   mkdir -p /var/tmp/streamfs /mnt/streamfs
#   docker run --rm -it --device /dev/fuse --cap-add SYS_ADMIN \
#       --security-opt apparmor=unconfined \
#       -v /var/tmp/streamfs:/data \
#       --mount type=bind,source=/mnt/streamfs,target=/mnt/streamfs,bind-propagation=rshared \
#       streamfs sh -c '[ -e /data/default.img ] || streamfs mkfs --size 4G /data/default.img; exec streamfs mount /data/default.img /mnt/streamfs'
# The rshared bind mount is what makes the FUSE mount made inside the
# container visible on the host at /mnt/streamfs (the host directory must be
# on a shared mount: `findmnt -o TARGET,PROPAGATION /mnt/streamfs`; if it is
# private, run `mount --bind /mnt/streamfs /mnt/streamfs && mount --make-rshared
# /mnt/streamfs` once). Without it the mount exists only inside the container.
# mkfs errors are shown; an existing image is kept.
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
