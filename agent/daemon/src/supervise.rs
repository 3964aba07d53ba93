//! systemd supervision: `READY=1`, `STOPPING=1` and watchdog pings, when the
//! service manager asks for them (no-ops otherwise).
//!
//! The watchdog means the engine: every half interval the pinger sends the
//! engine thread a heartbeat request, and pings systemd (`WATCHDOG=1`) only
//! when the engine answered it, which it does once the round that took it is
//! stored. A hung engine (a policy, a driver or a disk call that never
//! returns) therefore stops the pings, and systemd restarts the daemon.

use std::sync::mpsc::Sender;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::engine::Request;

/// Tells systemd the daemon is ready; starts the watchdog pings when
/// `WATCHDOG_USEC` asks for them (at half the interval), each one earned by
/// a heartbeat of the `engine`.
pub fn ready(engine: Sender<Request>) -> Option<JoinHandle<()>> {
    notify(&[sd_notify::NotifyState::Ready]);
    let every = sd_notify::watchdog_enabled()? / 2;
    log::info!("pinging the systemd watchdog every {every:?} while the engine answers");
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if heartbeat(&engine, every).await {
                notify(&[sd_notify::NotifyState::Watchdog]);
            } else {
                log::error!(
                    "the engine has not answered a heartbeat within {every:?}; \
                     withholding the watchdog ping"
                );
            }
        }
    }))
}

/// Whether the engine answers a heartbeat within `limit`.
async fn heartbeat(engine: &Sender<Request>, limit: Duration) -> bool {
    let (reply, answer) = tokio::sync::oneshot::channel();
    if engine.send(Request::Heartbeat { reply }).is_err() {
        return false;
    }
    matches!(tokio::time::timeout(limit, answer).await, Ok(Ok(())))
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
