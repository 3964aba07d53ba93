#!/usr/bin/env bash
# Builds the gpu-agent packages from this tree:
#   target/debian/gpu-agent_<version>-1_<arch>.deb      (cargo deb)
#   target/generate-rpm/gpu-agent-<version>-1.<arch>.rpm (cargo generate-rpm)
#   target/debian/gpu-agent-python_<version>-1_<arch>.deb (where python3-dev is)
#
# 1. checks for dpkg-dev's tools, and installs cargo-deb and cargo-generate-rpm when
#    missing (cargo install --locked);
# 2. builds gpuctl, gpu-agentd and every plugin under plugins/ in release mode,
#    with GPU_AGENT_PLUGIN_DIR=/usr/lib/gpu-agent/plugins so that the installed
#    binaries look there, in a target directory of their own (<target>/package,
#    seeded from target/release when it has none yet), so that target/release's
#    binaries keep finding the plugins beside them;
# 3. stages in packaging/build/ what is not a source file: the stripped
#    binaries and plugins, the manual pages (from the binaries' clap
#    definitions, gzipped) and the shell completions;
# 4. runs cargo deb and cargo generate-rpm (metadata in agent/daemon/Cargo.toml);
# 5. where python3-dev is, builds the python policy plugin (plugins/python)
#    and its own .deb, gpu-agent-python (metadata in plugins/python/Cargo.toml),
# and prints the package paths.
#
# With --spank, also the Slurm SPANK plugin's package (docs/slurm.md, "Energy
# in the job record"), built against this machine's Slurm headers
# (libslurm-dev), which it loads into alone:
#   target/debian/gpu-agent-slurm-spank_<version>-1_<arch>.deb
# (packaging/slurm/spank, a workspace of its own; dpkg-deb, as its
# dependency on the Slurm release comes from the headers).
#
# The plugin list is derived from plugins/*/Cargo.toml (each a plugin crate;
# the plain libraries they share live in plugins/lib/), so a new plugin crate
# is packaged without editing anything here. Test fixture plugins
# (tests/fixture-plugins/, a workspace of their own) are never built or shipped.
set -euo pipefail
cd "$(dirname "$0")/.."

spank=false
for arg in "$@"; do
    case $arg in
    --spank) spank=true ;;
    *)
        echo "build.sh: unknown argument '$arg' (the one option: --spank)" >&2
        exit 2
        ;;
    esac
done
slurm_headers=${SLURM_INCLUDE_DIR:-/usr/include}/slurm
if $spank && [ ! -f "$slurm_headers/spank.h" ]; then
    echo "build.sh --spank: $slurm_headers/spank.h is missing (apt-get install libslurm-dev)" >&2
    exit 1
fi

stage=packaging/build
plugin_dir=/usr/lib/gpu-agent/plugins
# Cargo's target directory (CARGO_TARGET_DIR and .cargo/config honoured).
target=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "build.sh: cannot find cargo's target directory" >&2; exit 1; }

step() { printf '== %s\n' "$*"; }

# cargo deb finds the binaries' library dependencies with dpkg-shlibdeps
# (without it the .deb silently depends on nothing), and the SPANK package's
# directory comes from dpkg-architecture: both are dpkg-dev's.
for tool in dpkg-shlibdeps dpkg-architecture; do
    if ! command -v "$tool" >/dev/null; then
        echo "build.sh: $tool is missing (apt-get install dpkg-dev)" >&2
        exit 1
    fi
done

for tool in deb generate-rpm; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        step "installing cargo-$tool"
        cargo install --locked "cargo-$tool"
    fi
done

# Each plugin crate: its package name, and the file its cdylib becomes.
plugin_packages=()
plugin_files=()
for manifest in plugins/*/Cargo.toml; do
    # A workspace of its own (plugins/python, which links libpython) is
    # not this workspace's to build or ship.
    grep -q '^\[workspace\]' "$manifest" && continue
    read -r package lib < <(awk '
        /^\[/ { section = $0 }
        /^name *=/ {
            value = $0; sub(/^name *= *"/, "", value); sub(/".*/, "", value)
            if (section == "[package]") package = value
            if (section == "[lib]") lib = value
        }
        END { if (lib == "") { lib = package; gsub(/-/, "_", lib) }; print package, lib }
    ' "$manifest")
    plugin_packages+=("$package")
    plugin_files+=("lib$lib.so")
done
if [ ${#plugin_packages[@]} -eq 0 ]; then
    echo "build.sh: no plugin crates under plugins/" >&2
    exit 1
fi

step "building gpuctl, gpu-agentd and ${#plugin_packages[@]} plugin(s): ${plugin_packages[*]}"
# Their own target directory: a build with the packaged plugin directory
# baked in must not replace the source tree's target/release binaries.
release=$target/package/release
# A first package build starts from a copy of the tree's release build,
# where there is one: the same sources and flags, so that only what
# GPU_AGENT_PLUGIN_DIR changes (the plugin loader and the two binaries) is
# compiled again, not every dependency (about 220 crates, 3 rebuilt).
if [ ! -d "$release" ] && [ -d "$target/release" ]; then
    mkdir -p "$target/package"
    cp -a "$target/release" "$release"
fi
GPU_AGENT_PLUGIN_DIR=$plugin_dir cargo build --release --locked --target-dir "$target/package" \
    -p gpu-agent-cli -p gpu-agent-daemon "${plugin_packages[@]/#/--package=}"

step "staging in $stage"
rm -rf "$stage"
mkdir -p "$stage"/{bin,plugins,man,completions}
for bin in gpu-agentd gpuctl; do
    install -m 755 "$release/$bin" "$stage/bin/$bin"
    strip --remove-section=.comment "$stage/bin/$bin"
done
# A product binary obeys no test hook (agent/daemon/src/test_hooks.rs, the
# e2e harness's `test-hooks` feature): a build without it holds none of
# their names.
if grep -q GPU_AGENT_TEST_ "$stage/bin/gpu-agentd"; then
    echo "build.sh: gpu-agentd was built with the test hooks (feature test-hooks)" >&2
    exit 1
fi
for file in "${plugin_files[@]}"; do
    install -m 644 "$release/$file" "$stage/plugins/$file"
    # Keep the dynamic symbols: the agent finds the plugin's root module by them.
    strip --strip-unneeded --remove-section=.comment "$stage/plugins/$file"
done

# Dated by the last commit, for reproducible packages.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

# The Debian changelog of this build (Debian policy wants one in every
# package): the version, the commit, the maintainer of agent/daemon/Cargo.toml.
version=$(cargo pkgid -p gpu-agent-daemon | sed 's/.*[#@]//')
maintainer=$(awk -F'"' '/^maintainer = /{ print $2; exit }' agent/daemon/Cargo.toml)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "a source tree")
cat > "$stage/changelog" <<CHANGELOG
gpu-agent ($version-1) unstable; urgency=medium

  * Built by packaging/build.sh from $commit; the changes are in the
    project's history.

 -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")
CHANGELOG
"$stage/bin/gpu-agentd" --manpage > "$stage/man/gpu-agentd.8"
"$stage/bin/gpuctl" manpages "$stage/man" > /dev/null
gzip -9n "$stage"/man/*
"$stage/bin/gpuctl" completions bash > "$stage/completions/gpuctl"
"$stage/bin/gpuctl" completions zsh > "$stage/completions/_gpuctl"
"$stage/bin/gpuctl" completions fish > "$stage/completions/gpuctl.fish"

step "cargo deb"
deb=$(cargo deb -p gpu-agent-daemon --no-build --locked | tail -n 1)
step "cargo generate-rpm"
# The built-in ldd scan, so the requirements do not depend on whether this
# machine has rpm's find-requires.
cargo generate-rpm -p agent/daemon --auto-req builtin
rpm=$(ls -t "$target"/generate-rpm/gpu-agent-*.rpm | head -n 1)

spank_deb=
if $spank; then
    step "building the SPANK plugin against $slurm_headers"
    cargo build --release --locked --manifest-path packaging/slurm/spank/Cargo.toml \
        --target-dir "$target/package"
    # The Slurm release it loads into: major.minor of SLURM_VERSION_NUMBER.
    number=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' "$slurm_headers/slurm_version.h")
    slurm=$(printf '%d.%02d' $((number >> 16)) $(((number >> 8) & 255)))
    arch=$(dpkg --print-architecture)
    plugin_dir=usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm
    root=$stage/spank-deb
    doc=$root/usr/share/doc/gpu-agent-slurm-spank
    mkdir -p "$root/DEBIAN" "$root/$plugin_dir" "$doc"
    install -m 644 "$release/libgpu_agent_spank.so" "$root/$plugin_dir/gpu_agent_spank.so"
    strip --strip-unneeded --remove-section=.comment "$root/$plugin_dir/gpu_agent_spank.so"
    sed 's/^gpu-agent (/gpu-agent-slurm-spank (/' "$stage/changelog" | gzip -9n > "$doc/changelog.Debian.gz"
    cat > "$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: gpu-agent

Files: *
Copyright: 2026 gpu-agent contributors
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
    cat > "$root/DEBIAN/control" <<CONTROL
Package: gpu-agent-slurm-spank
Version: $version-1
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk "$root" | cut -f1)
Depends: libc6, libgcc-s1, gpu-agent (= $version-1), slurmd (>= $slurm), slurmd (<< $slurm.99)
Section: admin
Priority: optional
Description: gpu-agent's Slurm SPANK plugin: GPU energy in the job record
 gpu_agent_spank.so writes each job's GPU energy, as gpu-agentd measured
 it on the node, into the job's AdminComment at the end of the job's
 step (scontrol show job, sacct). Built for Slurm $slurm, the only release
 it loads into. Enabled by a line in plugstack.conf:
 optional /$plugin_dir/gpu_agent_spank.so
 (/usr/share/doc/gpu-agent/slurm.md).
CONTROL
    (cd "$root" && find usr -type f -printf '%P\n' | sort | sed 's|^|usr/|' | xargs md5sum > DEBIAN/md5sums)
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    mkdir -p "$target/debian"
    spank_deb=$target/debian/gpu-agent-slurm-spank_$version-1_$arch.deb
    dpkg-deb --root-owner-group -Zxz --build "$root" "$spank_deb" > /dev/null
fi

# The python policy plugin (plugins/python, a workspace of its own) links
# libpython: a package of its own, gpu-agent-python, built where Python's
# embedding files are (python3-config, from python3-dev); no rpm.
python_deb=
if command -v python3-config >/dev/null; then
    step "building the python policy plugin and gpu-agent-python"
    cargo build --release --locked --manifest-path plugins/python/Cargo.toml --target-dir "$target/package"
    mkdir -p "$stage/python"
    install -m 644 "$release/libgpu_agent_policy_python.so" "$stage/python/"
    strip --strip-unneeded --remove-section=.comment "$stage/python/libgpu_agent_policy_python.so"
    sed '1s/^gpu-agent (/gpu-agent-python (/' "$stage/changelog" > "$stage/python/changelog"
    python_deb=$(cargo deb --manifest-path plugins/python/Cargo.toml --no-build --locked \
        --output "$target/debian/" | tail -n 1)
else
    echo "build.sh: no python3-config (install python3-dev): gpu-agent-python is not built" >&2
fi

step "packages"
echo "$deb"
echo "$rpm"
if [ -n "$spank_deb" ]; then
    echo "$spank_deb"
fi
[ -z "$python_deb" ] || echo "$python_deb"
