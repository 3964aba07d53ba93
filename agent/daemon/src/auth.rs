//! Who may do what (ARCHITECTURE.md, invariant 17): decided on the caller's uid, as the
//! bus reports it (`GetConnectionUnixUser`), or as the socket does on a
//! peer-to-peer connection.
//!
//! - everyone may read;
//! - root, the daemon's own user and members of `gpu-agent-admin` are admins:
//!   they may change the policy and cancel any task;
//! - admins and members of `gpu-agent` may submit tasks and cancel their own.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Mutex;

use nix::unistd::{getgrouplist, Gid, Group, Uid, User};
use zbus::{fdo::DBusProxy, message::Header, names::BusName, Connection};

use gpu_agent_dbus::AgentError;

/// The group whose members may submit tasks.
pub const MEMBER_GROUP: &str = "gpu-agent";
/// The group whose members may change the policy and manage every task.
pub const ADMIN_GROUP: &str = "gpu-agent-admin";

/// Callers remembered by unique bus name; the cache is emptied past this size.
const CACHE_LIMIT: usize = 4096;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    /// The caller's uid.
    pub uid: u32,
    /// May submit and cancel its own tasks.
    pub member: bool,
    /// May change the policy and cancel any task.
    pub admin: bool,
}

impl Roles {
    /// The roles of `uid` on a daemon running as `daemon_uid`.
    pub fn of(uid: u32, daemon_uid: u32) -> Roles {
        let admin = uid == 0 || uid == daemon_uid || in_group(uid, ADMIN_GROUP);
        Roles {
            uid,
            member: admin || in_group(uid, MEMBER_GROUP),
            admin,
        }
    }

    /// `AccessDenied` unless a member; `what` says what was refused.
    pub fn require_member(&self, what: &str) -> Result<(), AgentError> {
        if self.member {
            Ok(())
        } else {
            Err(AgentError::AccessDenied(format!(
                "uid {} may not {what}: that needs root or membership of group {MEMBER_GROUP}",
                self.uid
            )))
        }
    }

    /// `AccessDenied` unless an admin; `what` says what was refused.
    pub fn require_admin(&self, what: &str) -> Result<(), AgentError> {
        if self.admin {
            Ok(())
        } else {
            Err(AgentError::AccessDenied(format!(
                "uid {} may not {what}: that needs root or membership of group {ADMIN_GROUP}",
                self.uid
            )))
        }
    }
}

/// Whether `uid`'s user is in `group` (as primary or supplementary group).
fn in_group(uid: u32, group: &str) -> bool {
    let Ok(Some(group)) = Group::from_name(group) else {
        return false;
    };
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return false;
    };
    if user.gid == group.gid {
        return true;
    }
    let Ok(name) = CString::new(user.name) else {
        return false;
    };
    getgrouplist(&name, user.gid).is_ok_and(|gids: Vec<Gid>| gids.contains(&group.gid))
}

/// Finds callers' roles, remembering them per connection.
pub struct Auth {
    daemon_uid: u32,
    cache: Mutex<HashMap<String, Roles>>,
}

impl Auth {
    /// An authority for a daemon running as `daemon_uid`.
    pub fn new(daemon_uid: u32) -> Auth {
        Auth {
            daemon_uid,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The roles of the sender of the message with `header`.
    pub async fn roles(&self, conn: &Connection, header: &Header<'_>) -> Result<Roles, AgentError> {
        let failed = |e: String| AgentError::Failed(format!("cannot tell who is calling: {e}"));
        let Some(sender) = header.sender() else {
            // Peer to peer: the peer is the caller.
            let creds = conn.peer_creds().await.map_err(|e| failed(e.to_string()))?;
            let uid = creds
                .unix_user_id()
                .ok_or_else(|| failed("the peer has no uid".into()))?;
            return Ok(Roles::of(uid, self.daemon_uid));
        };
        let key = sender.to_string();
        if let Some(roles) = self.lock().get(&key) {
            return Ok(*roles);
        }
        let dbus = DBusProxy::new(conn)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let uid = dbus
            .get_connection_unix_user(BusName::Unique(sender.to_owned()))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let roles = Roles::of(uid, self.daemon_uid);
        let mut cache = self.lock();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, roles);
        Ok(roles)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Roles>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_daemon_user_are_admins() {
        assert_eq!(
            Roles::of(0, 1000),
            Roles {
                uid: 0,
                member: true,
                admin: true
            }
        );
        assert_eq!(
            Roles::of(1000, 1000),
            Roles {
                uid: 1000,
                member: true,
                admin: true
            }
        );
    }

    #[test]
    fn refusals_name_the_uid_and_the_group() {
        let outsider = Roles {
            uid: 4242,
            member: false,
            admin: false,
        };
        assert_eq!(
            outsider.require_member("submit tasks").unwrap_err().to_string(),
            "org.gpuagent.Agent1.Error.AccessDenied: uid 4242 may not submit tasks: that needs root or membership of group gpu-agent"
        );
        assert!(Roles {
            member: true,
            ..outsider
        }
        .require_member("x")
        .is_ok());
        assert_eq!(
            Roles { member: true, ..outsider }.require_admin("change the policy").unwrap_err().to_string(),
            "org.gpuagent.Agent1.Error.AccessDenied: uid 4242 may not change the policy: that needs root or membership of group gpu-agent-admin"
        );
    }
}
