//! The connection to gpu-agentd: which bus, the async runtime, and how D-Bus
//! failures read.

use std::future::Future;

use anyhow::{anyhow, Context, Result};
use gpu_agent_dbus::{describe_error, Agent1Proxy, BUS_NAME};
use zbus::{fdo, proxy::CacheProperties, Connection};

/// Which message bus the daemon is on (every command that talks to it).
#[derive(clap::Args)]
pub struct BusArgs {
    /// Talk to a gpu-agentd on the session bus (one started with --session).
    #[arg(long, conflicts_with = "system")]
    session: bool,
    /// Talk to gpu-agentd on the system bus (the default).
    #[arg(long)]
    system: bool,
}

/// Runs `work` to completion on a single-threaded tokio runtime.
pub fn block_on<T>(work: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(work)
}

/// A connection to the bus and a proxy of the agent on it.
pub struct Client {
    /// The agent's root object.
    pub agent: Agent1Proxy<'static>,
    connection: Connection,
    bus: &'static str,
}

impl Client {
    /// Connects to the bus `args` names. Only the bus is reached here: whether
    /// the daemon is on it shows at the first call.
    pub async fn connect(args: &BusArgs) -> Result<Client> {
        let (bus, connection) = if args.session {
            ("session", Connection::session().await)
        } else {
            ("system", Connection::system().await)
        };
        let connection = connection
            .map_err(|e| anyhow!("cannot connect to the {bus} bus: {}", describe_error(&e)))?;
        let agent = Agent1Proxy::builder(&connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| anyhow!(describe_error(&e)))?;
        Ok(Client {
            agent,
            connection,
            bus,
        })
    }

    /// The bus connection.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Awaits a D-Bus call. A daemon's error reply reads
    /// `org.gpuagent.Agent1.Error.<Name>: message`, verbatim; a missing daemon
    /// is named as such.
    pub async fn call<T, E: Into<zbus::Error>>(
        &self,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T> {
        call.await.map_err(|e| explain(self.bus, &e.into()))
    }
}

/// The error to show for `error`, a failed call on the `bus` bus.
fn explain(bus: &str, error: &zbus::Error) -> anyhow::Error {
    if !is_not_running(error) {
        return anyhow!(describe_error(error));
    }
    let hint = if bus == "system" {
        "is gpu-agentd running? start it with `systemctl start gpu-agent`, \
         or use --session for a daemon on the session bus"
    } else {
        "is `gpu-agentd --session` running? or use --system for the system daemon"
    };
    anyhow!("the service {BUS_NAME} is not running on the {bus} bus ({hint})")
}

/// Whether the bus answered that nobody owns the name called.
fn is_not_running(error: &zbus::Error) -> bool {
    const NAMES: [&str; 2] = [
        "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NameHasNoOwner",
    ];
    match error {
        zbus::Error::MethodError(name, _, _) => NAMES.contains(&name.as_str()),
        zbus::Error::FDO(e) => matches!(
            **e,
            fdo::Error::ServiceUnknown(_) | fdo::Error::NameHasNoOwner(_)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::Message;

    /// The error a bus replies with to a method call.
    fn reply(name: &str, message: &str) -> zbus::Error {
        let call = Message::method_call("/org/gpuagent/Agent1", "GetTask")
            .unwrap()
            .build(&("t9",))
            .unwrap();
        let error = Message::error(&call.header(), name)
            .unwrap()
            .build(&(message,))
            .unwrap();
        zbus::Error::from(error)
    }

    #[test]
    fn a_missing_daemon_is_recognised_in_both_forms() {
        let unknown = "org.freedesktop.DBus.Error.ServiceUnknown";
        assert!(is_not_running(&reply(
            unknown,
            "not provided by any .service files"
        )));
        assert!(is_not_running(&zbus::Error::FDO(Box::new(
            fdo::Error::ServiceUnknown("gone".into())
        ))));
        assert!(!is_not_running(&reply(
            "org.gpuagent.Agent1.Error.NoSuchTask",
            "no task \"t9\""
        )));
    }

    #[test]
    fn daemon_errors_read_verbatim() {
        let e = reply("org.gpuagent.Agent1.Error.NoSuchTask", "no task \"t9\"");
        assert_eq!(
            explain("system", &e).to_string(),
            "org.gpuagent.Agent1.Error.NoSuchTask: no task \"t9\""
        );
    }

    #[test]
    fn a_missing_daemon_names_the_service_and_the_bus() {
        let e = reply("org.freedesktop.DBus.Error.ServiceUnknown", "whatever");
        assert_eq!(
            explain("system", &e).to_string(),
            "the service org.gpuagent.Agent1 is not running on the system bus \
             (is gpu-agentd running? start it with `systemctl start gpu-agent`, \
             or use --session for a daemon on the session bus)"
        );
        assert_eq!(
            explain("session", &e).to_string(),
            "the service org.gpuagent.Agent1 is not running on the session bus \
             (is `gpu-agentd --session` running? or use --system for the system daemon)"
        );
    }
}
