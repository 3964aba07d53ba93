#!/usr/bin/env bash
# Builds the gpu-agent packages from this tree:
#   target/debian/gpu-agent_<version>-1_<arch>.deb      (cargo deb)
#   target/generate-rpm/gpu-agent-<version>-1.<arch>.rpm (cargo generate-rpm)
#
# 1. installs cargo-deb and cargo-generate-rpm when missing (cargo install --locked);
# 2. builds gpuctl, gpu-agentd and every plugin under plugins/ in release mode,
#    with GPU_AGENT_PLUGIN_DIR=/usr/lib/gpu-agent/plugins so that the installed
#    binaries look there, in a target directory of their own (<target>/package),
#    so that target/release's binaries keep finding the plugins beside them;
# 3. stages in packaging/build/ what is not a source file: the stripped
#    binaries and plugins, the manual pages (from the binaries' clap
#    definitions, gzipped) and the shell completions;
# 4. runs cargo deb and cargo generate-rpm (metadata in agent/daemon/Cargo.toml) and
#    prints the two package paths.
#
# The plugin list is derived from plugins/*/Cargo.toml (each a plugin crate;
# the plain libraries they share live in plugins/lib/), so a new plugin crate
# is packaged without editing anything here. Test fixture plugins
# (tests/fixture-plugins/, a workspace of their own) are never built or shipped.
set -euo pipefail
cd "$(dirname "$0")/.."

stage=packaging/build
plugin_dir=/usr/lib/gpu-agent/plugins
# Cargo's target directory (CARGO_TARGET_DIR and .cargo/config honoured).
target=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "build.sh: cannot find cargo's target directory" >&2; exit 1; }

step() { printf '== %s\n' "$*"; }

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

step "packages"
echo "$deb"
echo "$rpm"
