//! Idempotent `Submit`: the `client_token`s seen lately.
//!
//! A client whose `Submit` reply was lost (the daemon died after storing the
//! task, before answering) sends the same spec with the same token again; the
//! engine answers the first task's id instead of queueing a second task. A
//! token belongs to its uid and is remembered for
//! [`CLIENT_TOKEN_RETENTION_S`] after its submission, also across restarts:
//! it is stored in the task's spec and read back with the tasks.

use std::collections::HashMap;

use gpu_agent_dbus::CLIENT_TOKEN_RETENTION_S;

/// The tokens of recent submissions: (owner uid, token) -> (task id, submitted).
#[derive(Default)]
pub(super) struct ClientTokens {
    seen: HashMap<(u32, String), (String, f64)>,
    /// The size past which expired tokens are dropped (doubles as it grows).
    prune_at: usize,
}

impl ClientTokens {
    /// Remembers that `owner` submitted task `id` with `token` (if not
    /// empty) at `submitted` (unix seconds).
    pub(super) fn remember(
        &mut self,
        owner: u32,
        token: &str,
        id: &str,
        submitted: f64,
        now_unix: f64,
    ) {
        if token.is_empty() || now_unix - submitted > CLIENT_TOKEN_RETENTION_S {
            return;
        }
        if self.seen.len() >= self.prune_at.max(1024) {
            self.seen
                .retain(|_, (_, submitted)| now_unix - *submitted <= CLIENT_TOKEN_RETENTION_S);
            self.prune_at = 2 * self.seen.len();
        }
        self.seen
            .insert((owner, token.to_string()), (id.to_string(), submitted));
    }

    /// Forgets the token of task `id` (its write failed: nothing was queued).
    pub(super) fn forget(&mut self, owner: u32, token: &str, id: &str) {
        let key = (owner, token.to_string());
        if self.seen.get(&key).is_some_and(|(seen, _)| seen == id) {
            self.seen.remove(&key);
        }
    }

    /// The id of the task `owner` submitted with `token` within the retention
    /// window, if any.
    pub(super) fn lookup(&self, owner: u32, token: &str, now_unix: f64) -> Option<&str> {
        if token.is_empty() {
            return None;
        }
        self.seen
            .get(&(owner, token.to_string()))
            .filter(|(_, submitted)| now_unix - submitted <= CLIENT_TOKEN_RETENTION_S)
            .map(|(id, _)| id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_its_owners_within_the_window() {
        let mut tokens = ClientTokens::default();
        tokens.remember(1000, "k", "t1", 100.0, 100.0);
        tokens.remember(1000, "", "t2", 100.0, 100.0);
        assert_eq!(tokens.lookup(1000, "k", 100.0), Some("t1"));
        assert_eq!(tokens.lookup(1001, "k", 100.0), None, "another uid");
        assert_eq!(tokens.lookup(1000, "", 100.0), None, "no token");
        let end = 100.0 + CLIENT_TOKEN_RETENTION_S;
        assert_eq!(tokens.lookup(1000, "k", end), Some("t1"));
        assert_eq!(tokens.lookup(1000, "k", end + 1.0), None, "expired");
        // A stored task older than the window is not remembered at all.
        tokens.remember(1000, "old", "t3", 0.0, end + 1.0);
        assert_eq!(tokens.lookup(1000, "old", 0.0), None);
    }

    #[test]
    fn a_failed_write_forgets_only_its_own_token() {
        let mut tokens = ClientTokens::default();
        tokens.remember(0, "k", "t1", 1.0, 1.0);
        tokens.forget(0, "k", "t9");
        assert_eq!(tokens.lookup(0, "k", 1.0), Some("t1"));
        tokens.forget(0, "k", "t1");
        assert_eq!(tokens.lookup(0, "k", 1.0), None);
    }

    #[test]
    fn expired_tokens_are_dropped_as_the_map_grows() {
        let mut tokens = ClientTokens::default();
        for i in 0..1024 {
            tokens.remember(0, &format!("k{i}"), &format!("t{i}"), 0.0, 0.0);
        }
        assert_eq!(tokens.seen.len(), 1024);
        let later = CLIENT_TOKEN_RETENTION_S + 1.0;
        tokens.remember(0, "new", "tx", later, later);
        assert_eq!(tokens.seen.len(), 1, "the expired ones went");
        assert_eq!(tokens.lookup(0, "new", later), Some("tx"));
    }
}
