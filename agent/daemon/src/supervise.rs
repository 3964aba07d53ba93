//! systemd supervision: `READY=1`, `STOPPING=1` and watchdog pings, when the
//! service manager asks for them (no-ops otherwise).

use tokio::task::JoinHandle;

/// Tells systemd the daemon is ready; starts the watchdog pings when
/// `WATCHDOG_USEC` asks for them (at half the interval).
pub fn ready() -> Option<JoinHandle<()>> {
    notify(&[sd_notify::NotifyState::Ready]);
    let every = sd_notify::watchdog_enabled()? / 2;
    log::info!("pinging the systemd watchdog every {every:?}");
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            notify(&[sd_notify::NotifyState::Watchdog]);
        }
    }))
}

/// Tells systemd the daemon is stopping.
pub fn stopping() {
    notify(&[sd_notify::NotifyState::Stopping]);
}

fn notify(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(state) {
        log::warn!("cannot notify systemd: {e}");
    }
}
