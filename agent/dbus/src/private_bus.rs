//! A private D-Bus bus for `gpuctl demo` and the end-to-end tests: a
//! `dbus-daemon` of its own in a temporary directory, stopped on drop.
//!
//! Its policy lets every local user connect and own names, so a test can call
//! the daemon as another uid, as on the system bus.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Why the bus could not start.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// `dbus-daemon` is missing or failed.
    #[error("cannot start dbus-daemon: {0} (install the dbus-daemon package)")]
    Start(std::io::Error),
    /// It started but printed no address.
    #[error("dbus-daemon printed no address: {0}")]
    NoAddress(String),
}

/// A running private bus.
pub struct PrivateBus {
    child: Child,
    address: String,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl PrivateBus {
    /// Starts a bus.
    pub fn start() -> Result<PrivateBus, BusError> {
        let dir = tempfile::Builder::new()
            .prefix("gpu-agent-bus.")
            .tempdir()
            .map_err(BusError::Start)?;
        // Other users must reach the socket inside.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(BusError::Start)?;
        let socket = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        std::fs::write(&config, config_text(&socket)).map_err(BusError::Start)?;
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address=1", "--nopidfile"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(BusError::Start)?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let read = BufReader::new(stdout).read_line(&mut line);
        let address = line.trim().to_string();
        if read.is_err() || address.is_empty() {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(BusError::NoAddress(status));
        }
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777))
            .map_err(BusError::Start)?;
        Ok(PrivateBus {
            child,
            address,
            socket,
            _dir: dir,
        })
    }

    /// The address to connect to (for `DBUS_SESSION_BUS_ADDRESS`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The socket file.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The bus daemon's process id (for benchmarks that weigh its CPU).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_text(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}
