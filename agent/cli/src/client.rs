//! The connection to gpu-agentd: which bus, the async runtime, and how D-Bus
//! failures read.

use std::future::Future;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use gpu_agent_dbus::{describe_error, Agent1Proxy, BUS_NAME};
use zbus::{connection, fdo, proxy::CacheProperties, Connection};

/// Which message bus the daemon is on (every command that talks to it).
///
/// Also accepted before the command (`gpuctl --session status`), and read
/// from [`BUS_VARIABLE`] when neither place names one.
#[derive(clap::Args, Clone, Copy, Default)]
pub struct BusArgs {
    /// Talk to a gpu-agentd on the session bus (one started with --session).
    #[arg(long, conflicts_with = "system")]
    pub session: bool,
    /// Talk to gpu-agentd on the system bus (the default).
    #[arg(long)]
    pub system: bool,
}

/// The environment variable that names the bus: `session`, `system` or a
/// D-Bus address (`unix:path=/run/...`).
pub const BUS_VARIABLE: &str = "GPU_AGENT_BUS";

/// The bus named before the command, for every command's [`BusArgs`].
static BEFORE_COMMAND: OnceLock<BusArgs> = OnceLock::new();

/// Records the `--session`/`--system` given before the command.
pub fn set_bus_before_command(args: BusArgs) {
    let _ = BEFORE_COMMAND.set(args);
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bus {
    System,
    Session,
    Address(String),
}

impl Bus {
    /// The bus `args` name, else the one named before the command, else
    /// `variable`'s (the value of [`BUS_VARIABLE`]), else the system bus.
    fn choose(args: &BusArgs, variable: Option<&str>) -> Result<Bus> {
        let before = BEFORE_COMMAND.get().copied().unwrap_or_default();
        for given in [args, &before] {
            if given.session {
                return Ok(Bus::Session);
            }
            if given.system {
                return Ok(Bus::System);
            }
        }
        match variable.map(str::trim) {
            None | Some("") | Some("system") => Ok(Bus::System),
            Some("session") => Ok(Bus::Session),
            Some(address) if address.contains(':') => Ok(Bus::Address(address.to_string())),
            Some(other) => Err(Failure::usage(format!(
                "{BUS_VARIABLE}={other:?}: expected session, system or a D-Bus address such as unix:path=/run/gpu-agent.sock"
            ))),
        }
    }

    fn name(&self) -> String {
        match self {
            Bus::System => "the system bus".into(),
            Bus::Session => "the session bus".into(),
            Bus::Address(a) => format!("the bus at {a}"),
        }
    }
}

/// A failure with the exit status it stands for (gpuctl(1), EXIT STATUS).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// The exit status.
    pub status: u8,
    message: String,
}

impl Failure {
    /// A negative answer: what was asked about is not so (exit status 1).
    pub fn negative(message: impl Into<String>) -> anyhow::Error {
        Failure::with_status(NEGATIVE, message)
    }

    /// A bad command line found after parsing (exit status 2).
    pub fn usage(message: impl Into<String>) -> anyhow::Error {
        Failure::with_status(USAGE, message)
    }

    /// A failure with exit status `status`.
    pub fn with_status(status: u8, message: impl Into<String>) -> anyhow::Error {
        Failure {
            status,
            message: message.into(),
        }
        .into()
    }
}

/// Exit status: a negative answer (and failures of gpuctl's own work).
pub const NEGATIVE: u8 = 1;
/// Exit status: a bad command line.
pub const USAGE: u8 = 2;
/// Exit status: the daemon cannot be reached, or refused the caller.
pub const UNREACHABLE: u8 = 3;
/// Exit status: the daemon answered an error.
pub const DAEMON_ERROR: u8 = 4;

/// The exit status of `error`: the first [`Failure`] in its chain, else 1.
pub fn exit_status(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|e| e.downcast_ref::<Failure>())
        .map_or(NEGATIVE, |f| f.status)
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
    bus: String,
}

impl Client {
    /// Connects to the bus `args` names. Only the bus is reached here: whether
    /// the daemon is on it shows at the first call.
    pub async fn connect(args: &BusArgs) -> Result<Client> {
        let bus = Bus::choose(args, std::env::var(BUS_VARIABLE).ok().as_deref())?;
        let connection = match &bus {
            Bus::System => Connection::system().await,
            Bus::Session => Connection::session().await,
            Bus::Address(address) => match connection::Builder::address(address.as_str()) {
                Ok(builder) => builder.build().await,
                Err(e) => Err(e),
            },
        };
        let name = bus.name();
        let connection = connection.map_err(|e| {
            Failure::with_status(
                UNREACHABLE,
                format!("cannot connect to {name}: {}", describe_error(&e)),
            )
        })?;
        let agent = Agent1Proxy::builder(&connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| Failure::with_status(UNREACHABLE, describe_error(&e)))?;
        Ok(Client {
            agent,
            connection,
            bus: name,
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
        call.await.map_err(|e| explain(&self.bus, &e.into()))
    }
}

/// The error to show for `error`, a failed call on `bus`, with its exit
/// status: 3 when the daemon is not there (or died before answering) or
/// refused the caller, 4 for any other error it answered.
fn explain(bus: &str, error: &zbus::Error) -> anyhow::Error {
    if !is_not_running(error) {
        let status = if refused_or_gone(error) {
            UNREACHABLE
        } else {
            DAEMON_ERROR
        };
        return Failure::with_status(status, describe_error(error));
    }
    let hint = match bus {
        "the system bus" => {
            "is gpu-agentd running? start it with `systemctl start gpu-agent`, \
             or use --session for a daemon on the session bus"
        }
        "the session bus" => {
            "is `gpu-agentd --session` running? or use --system for the system daemon"
        }
        _ => "is gpu-agentd running on it?",
    };
    Failure::with_status(
        UNREACHABLE,
        format!("the service {BUS_NAME} is not running on {bus} ({hint})"),
    )
}

/// Whether the daemon (or the bus for it) refused the caller, or went away
/// without answering.
fn refused_or_gone(error: &zbus::Error) -> bool {
    const NAMES: [&str; 4] = [
        "org.gpuagent.Agent1.Error.AccessDenied",
        "org.freedesktop.DBus.Error.AccessDenied",
        "org.freedesktop.DBus.Error.NoReply",
        "org.freedesktop.DBus.Error.Disconnected",
    ];
    match error {
        zbus::Error::MethodError(name, _, _) => NAMES.contains(&name.as_str()),
        zbus::Error::FDO(e) => matches!(
            **e,
            fdo::Error::AccessDenied(_) | fdo::Error::NoReply(_) | fdo::Error::Disconnected(_)
        ),
        zbus::Error::InputOutput(_) => true,
        _ => false,
    }
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
            explain("the system bus", &e).to_string(),
            "org.gpuagent.Agent1.Error.NoSuchTask: no task \"t9\""
        );
        assert_eq!(exit_status(&explain("the system bus", &e)), DAEMON_ERROR);
        let denied = reply("org.gpuagent.Agent1.Error.AccessDenied", "uid 7 may not");
        assert_eq!(
            exit_status(&explain("the system bus", &denied)),
            UNREACHABLE
        );
        let gone = reply("org.freedesktop.DBus.Error.NoReply", "no reply");
        assert_eq!(exit_status(&explain("the system bus", &gone)), UNREACHABLE);
        // A context on the way keeps the status.
        let wrapped = explain("the system bus", &e).context("config.yaml");
        assert_eq!(exit_status(&wrapped), DAEMON_ERROR);
        assert_eq!(exit_status(&anyhow::anyhow!("cannot read x")), NEGATIVE);
    }

    #[test]
    fn the_bus_comes_from_the_flags_then_the_variable() {
        let none = BusArgs::default();
        let session = BusArgs {
            session: true,
            system: false,
        };
        assert_eq!(Bus::choose(&none, None).unwrap(), Bus::System);
        assert_eq!(Bus::choose(&none, Some("session")).unwrap(), Bus::Session);
        assert_eq!(Bus::choose(&session, Some("system")).unwrap(), Bus::Session);
        assert_eq!(
            Bus::choose(&none, Some("unix:path=/run/x")).unwrap(),
            Bus::Address("unix:path=/run/x".into())
        );
        let e = Bus::choose(&none, Some("sesion")).unwrap_err();
        assert_eq!(exit_status(&e), USAGE);
        assert!(
            e.to_string().starts_with(
                "GPU_AGENT_BUS=\"sesion\": expected session, system or a D-Bus address"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_missing_daemon_names_the_service_and_the_bus() {
        let e = reply("org.freedesktop.DBus.Error.ServiceUnknown", "whatever");
        assert_eq!(exit_status(&explain("the system bus", &e)), UNREACHABLE);
        assert_eq!(
            explain("the system bus", &e).to_string(),
            "the service org.gpuagent.Agent1 is not running on the system bus \
             (is gpu-agentd running? start it with `systemctl start gpu-agent`, \
             or use --session for a daemon on the session bus)"
        );
        assert_eq!(
            explain("the session bus", &e).to_string(),
            "the service org.gpuagent.Agent1 is not running on the session bus \
             (is `gpu-agentd --session` running? or use --system for the system daemon)"
        );
    }
}
