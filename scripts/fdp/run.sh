#!/bin/bash
# End-to-end test of streamfs's NVMe FDP backend on QEMU's emulated FDP drive.
#
# Installs what it needs (qemu-system-x86 >= 8 from bookworm-backports,
# nvme-cli, kmod, cpio), fetches Debian's 6.12 kernel and busybox-static
# packages without installing them, builds an initramfs holding the kernel's NVMe
# modules, nvme-cli, the backend's VM test binary and (when its CLI exists)
# streamfs, boots it under QEMU and reads the verdict from the console.
#
# Usage: scripts/fdp/run.sh            exit 0 on PASS, 1 on FAIL or timeout
# Environment:
#   STREAMFS_FDP_WORK     cache and output directory (/var/tmp/streamfs-fdp)
#   STREAMFS_FDP_ACCEL    QEMU accelerator (tcg; kvm where /dev/kvm works)
#   STREAMFS_FDP_TIMEOUT  seconds before the guest is killed (900)
#   STREAMFS_FDP_BENCH    1: also run the 4k/128k write throughput benchmark
#   STREAMFS_FDP_LBA      namespace block size, 512 or 4096 (4096)
#   STREAMFS_FDP_FS       auto (run the filesystem test when the streamfs
#                         CLI has mkfs), 1 (require it) or 0 (skip it)
#   STREAMFS_FDP_ZNS      1 (default): also give the guest zoned (ZNS)
#                         namespaces on a second controller and run the
#                         backend's ZNS tests and (with the filesystem
#                         test) the filesystem on them; 0: FDP only
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${STREAMFS_FDP_WORK:-/var/tmp/streamfs-fdp}
accel=${STREAMFS_FDP_ACCEL:-tcg}
timeout_s=${STREAMFS_FDP_TIMEOUT:-900}
bench=${STREAMFS_FDP_BENCH:-0}
fsmode=${STREAMFS_FDP_FS:-auto}
lba=${STREAMFS_FDP_LBA:-4096}
zns=${STREAMFS_FDP_ZNS:-1}
case $lba in 512 | 4096) ;; *) echo "fdp: STREAMFS_FDP_LBA must be 512 or 4096" >&2; exit 2 ;; esac

log() { echo "fdp: $*" >&2; }
die() {
	echo "fdp: FAIL: $*" >&2
	exit 1
}

mkdir -p "$work/debs"
t_start=$(date +%s)

# --- packages -------------------------------------------------------------

# The backports suite, on the mirror the machine's own sources use.
ensure_backports() {
	if grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		return
	fi
	local mirror
	mirror=$(grep -hoE '^(URIs:|deb)[[:space:]]+[^[:space:]]+' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '{print $NF}' | grep -E '/debian/?$' | head -n1 || true)
	[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
	log "adding bookworm-backports from $mirror"
	cat >/etc/apt/sources.list.d/streamfs-backports.sources <<EOF
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	apt-get update -q >/dev/null
}

# QEMU gained the FDP emulation (nvme-subsys fdp=on) in 8.0.
qemu_has_fdp() {
	command -v qemu-system-x86_64 >/dev/null &&
		qemu-system-x86_64 -device nvme-subsys,help 2>/dev/null | grep -q 'fdp='
}

ensure_packages() {
	local need=()
	command -v nvme >/dev/null || need+=(nvme-cli)
	command -v depmod >/dev/null || need+=(kmod)
	command -v cpio >/dev/null || need+=(cpio)
	command -v xz >/dev/null || need+=(xz-utils)
	if ! qemu_has_fdp || [ ${#need[@]} -gt 0 ]; then
		ensure_backports
		# Package lists may predate the backports source (or be missing on
		# a fresh machine, where apt-cache finds nothing).
		apt-cache policy qemu-system-x86 2>/dev/null | grep -q bookworm-backports ||
			apt-get update -q >/dev/null
	fi
	if [ ${#need[@]} -gt 0 ]; then
		log "installing ${need[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
	fi
	if ! qemu_has_fdp; then
		log "installing qemu-system-x86 from bookworm-backports"
		apt-cache policy qemu-system-x86 | sed -n '1,8p' >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			-t bookworm-backports qemu-system-x86 >/dev/null
		qemu_has_fdp || die "qemu-system-x86_64 $(qemu-system-x86_64 --version | head -n1) has no FDP emulation"
	fi
}

# fetch_deb [APT OPTIONS] PACKAGE downloads a .deb into the cache.
fetch_deb() {
	(cd "$work/debs" && apt-get download -q "$@") >"$work/apt-download.log" 2>&1 || {
		cat "$work/apt-download.log" >&2
		die "apt-get download $* failed"
	}
}

# --- kernel ---------------------------------------------------------------

# Debian's 6.12 kernel from bookworm-backports, unpacked (never installed).
ensure_kernel() {
	local deb
	deb=$(ls "$work"/debs/linux-image-6.12.*-amd64_*.deb 2>/dev/null | sort -V | tail -n1 || true)
	if [ -z "$deb" ]; then
		ensure_backports
		local pkg
		pkg=$(apt-cache depends -t bookworm-backports linux-image-amd64 2>/dev/null |
			awk '/Depends: linux-image-6\.12/ {print $2; exit}')
		[ -n "$pkg" ] || {
			apt-get update -q >/dev/null
			pkg=$(apt-cache depends -t bookworm-backports linux-image-amd64 |
				awk '/Depends: linux-image-6\.12/ {print $2; exit}')
		}
		[ -n "$pkg" ] || die "no 6.12 kernel package in bookworm-backports"
		log "downloading $pkg"
		fetch_deb -t bookworm-backports "$pkg"
		deb=$(ls "$work"/debs/linux-image-6.12.*-amd64_*.deb | sort -V | tail -n1)
	fi
	kroot="$work/kernel/$(basename "$deb" .deb)"
	if [ ! -f "$kroot/.unpacked" ]; then
		rm -rf "$kroot"
		mkdir -p "$kroot"
		dpkg -x "$deb" "$kroot"
		touch "$kroot/.unpacked"
	fi
	kver=$(ls "$kroot/lib/modules" | head -n1)
	vmlinuz="$kroot/boot/vmlinuz-$kver"
	[ -f "$vmlinuz" ] || die "no kernel image in $deb"
	# The package ships no modules.dep: depmod writes it at install time.
	[ -s "$kroot/lib/modules/$kver/modules.dep" ] || depmod -b "$kroot" "$kver"
	grep -q '^CONFIG_FUSE_FS=y' "$kroot/boot/config-$kver" ||
		die "kernel $kver does not have FUSE built in"
}

# A static busybox for the guest, unpacked from its package: installing
# busybox-static would replace the host's busybox.
ensure_busybox() {
	busybox="$work/busybox/bin/busybox"
	[ -x "$busybox" ] && return
	local deb
	deb=$(ls "$work"/debs/busybox-static_*.deb 2>/dev/null | sort -V | tail -n1 || true)
	if [ -z "$deb" ]; then
		fetch_deb busybox-static
		deb=$(ls "$work"/debs/busybox-static_*.deb | sort -V | tail -n1)
	fi
	rm -rf "$work/busybox"
	dpkg -x "$deb" "$work/busybox"
	[ -x "$busybox" ] || die "no busybox in $deb"
}

# --- binaries -------------------------------------------------------------

build_binaries() {
	log "building the backend VM test and streamfs"
	(cd "$root" && CGO_ENABLED=0 go test -c -tags fdpvm -o "$work/nvme-fdpvm.test" ./backend/nvme) ||
		die "go test -c ./backend/nvme failed"
	have_fs=0
	rm -f "$work/streamfs"
	if [ "$fsmode" != 0 ]; then
		if (cd "$root" && CGO_ENABLED=0 go build -o "$work/streamfs" .) 2>"$work/build-streamfs.log" &&
			"$work/streamfs" --help 2>&1 | grep -q mkfs; then
			have_fs=1
		elif [ "$fsmode" = 1 ]; then
			cat "$work/build-streamfs.log" >&2
			die "the streamfs binary has no mkfs command yet"
		else
			log "streamfs CLI without mkfs: the filesystem test is skipped"
			rm -f "$work/streamfs"
		fi
	fi
}

# --- initramfs ------------------------------------------------------------

copy_with_libs() { # copy_with_libs BIN DESTROOT
	local bin=$1 dest=$2
	install -D -m 0755 "$bin" "$dest$bin"
	ldd "$bin" 2>/dev/null | grep -oE '/[^ ]+' | while read -r lib; do
		[ -f "$lib" ] && install -D -m 0755 "$lib" "$dest$lib"
	done
}

build_initramfs() {
	local ir="$work/initramfs"
	rm -rf "$ir"
	mkdir -p "$ir"/{bin,sbin,proc,sys,dev,tmp,mnt,run,lib/modules,usr/bin,usr/sbin,etc}
	cp "$busybox" "$ir/bin/busybox"
	ln -s busybox "$ir/bin/sh"
	copy_with_libs "$(readlink -f "$(command -v nvme)")" "$ir"
	ln -sf "$(readlink -f "$(command -v nvme)")" "$ir/bin/nvme"
	# /lib64 holds the dynamic loader on amd64.
	[ -e "$ir/lib64/ld-linux-x86-64.so.2" ] || install -D -m 0755 /lib64/ld-linux-x86-64.so.2 "$ir/lib64/ld-linux-x86-64.so.2"

	# nvme and what modules.dep says it needs, dependencies first,
	# decompressed so that busybox insmod loads them whatever its build.
	local mdir="$kroot/lib/modules/$kver" order=()
	local line
	line=$(grep -E '^kernel/drivers/nvme/host/nvme\.ko[^:]*:' "$mdir/modules.dep") ||
		die "nvme module not found in $kver"
	local mods
	read -r -a mods <<<"${line#*:}"
	local i
	for ((i = ${#mods[@]} - 1; i >= 0; i--)); do order+=("${mods[i]}"); done
	order+=("${line%%:*}")
	: >"$ir/modules.order"
	for m in "${order[@]}"; do
		local name
		name=$(basename "$m")
		name=${name%.xz}
		name=${name%.zst}
		case "$m" in
		*.xz) xz -dc "$mdir/$m" >"$ir/lib/modules/$name" ;;
		*.zst) zstd -dqc "$mdir/$m" >"$ir/lib/modules/$name" ;;
		*) cp "$mdir/$m" "$ir/lib/modules/$name" ;;
		esac
		echo "$name" >>"$ir/modules.order"
	done

	install -m 0755 "$here/init.sh" "$ir/init"
	install -m 0755 "$here/guest-test.sh" "$ir/bin/guest-test.sh"
	install -m 0755 "$here/guest-zns-test.sh" "$ir/bin/guest-zns-test.sh"
	install -m 0644 "$here/guest-lib.sh" "$ir/bin/guest-lib.sh"
	install -m 0755 "$work/nvme-fdpvm.test" "$ir/bin/nvme-fdpvm.test"
	[ "$have_fs" = 1 ] && install -m 0755 "$work/streamfs" "$ir/bin/streamfs"
	(cd "$ir" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$work/initramfs.cpio.gz"
}

# --- run ------------------------------------------------------------------

run_vm() {
	local img="$work/fdp.img" console="$work/console.log"
	rm -f "$img"
	truncate -s 1G "$img" # fresh every run: the FDP state restarts too
	local zdev=()
	if [ "$zns" = 1 ]; then
		# A second controller with two zoned namespaces of 8 MiB zones of
		# 6 MiB capacity. The first has 4 open and 6 active zones
		# (backend/nvme/znsvm_test.go checks these numbers), too few for
		# the filesystem to offer any stream; the second, for the
		# filesystem test with streams, 14 open and active.
		rm -f "$work/zns.img" "$work/zns2.img"
		truncate -s 256M "$work/zns.img"
		truncate -s 128M "$work/zns2.img"
		local zopts=logical_block_size=4096,physical_block_size=4096,zoned=on,zoned.zone_size=8M,zoned.zone_capacity=6M
		zdev=(-device nvme,serial=zns0,id=zns0
			-drive file="$work/zns.img",if=none,id=zns,format=raw
			-device nvme-ns,drive=zns,bus=zns0,nsid=1,$zopts,zoned.max_open=4,zoned.max_active=6
			-drive file="$work/zns2.img",if=none,id=zns2,format=raw
			-device nvme-ns,drive=zns2,bus=zns0,nsid=2,$zopts,zoned.max_open=14,zoned.max_active=14)
	fi
	local append="console=ttyS0 panic=-1 streamfs.zns=$zns streamfs.bench=$bench streamfs.benchcount=${STREAMFS_FDP_BENCH_COUNT:-1} streamfs.fs=$have_fs streamfs.lba=$lba"
	log "booting ($accel, timeout ${timeout_s}s); console in $console"
	local t0 rc=0
	t0=$(date +%s)
	timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
		-accel "$accel" -nographic -nic none -no-reboot -m 1G -smp 2 \
		-kernel "$vmlinuz" -initrd "$work/initramfs.cpio.gz" -append "$append" \
		-device nvme-subsys,id=subsys0,nqn=subsys0,fdp=on,fdp.runs=8M,fdp.nrg=1,fdp.nruh=8 \
		-device nvme,serial=deadbeef,subsys=subsys0 \
		-drive file="$img",if=none,id=nvm,format=raw \
		-device nvme-ns,drive=nvm,nsid=1,logical_block_size=$lba,physical_block_size=$lba,fdp.ruhs=0-7 \
		"${zdev[@]}" \
		</dev/null >"$console" 2>&1 || rc=$?
	vm_secs=$(($(date +%s) - t0))
	# Console lines end in CR LF.
	tr -d '\r' <"$console" >"$console.txt"
	grep -E '^(STREAMFS-FDP|STREAMFS-ZNS|---|===|PASS|FAIL|ok|fdp:|guest:|    fdpvm_test|    znsvm_test|Benchmark)' "$console.txt" >&2 || true
	if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		die "guest timed out after ${timeout_s}s (console: $console.txt)"
	fi
}

ensure_packages
ensure_kernel
ensure_busybox
build_binaries
build_initramfs
t_prep=$(($(date +%s) - t_start))
run_vm
log "preparation ${t_prep}s, VM ${vm_secs}s ($(grep -oE 'STREAMFS-FDP-TIME: .*' "$work/console.log.txt" | head -n1 || true))"
if grep -qx 'STREAMFS-FDP: PASS' "$work/console.log.txt"; then
	log PASS
	exit 0
fi
die "no PASS marker (console: $work/console.log.txt)"
