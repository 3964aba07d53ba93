//! Policies on a thread of their own, each call within a time budget.
//!
//! A plugin runs in the daemon's process, and a call into it that never
//! returns would hold the engine thread, and with it every request, the
//! watchdog and the stop. So the daemon builds each policy on a thread of its
//! own and hands every call over to that thread, waiting at most the budget
//! (agent.toml `policy_budget_ms`) for the answer:
//! - a constructor over budget is a refused policy, like one that returns an
//!   error;
//! - a call over budget is answered `Err`, so the core takes it as a policy
//!   fault (the built-in FIFO order from then on, invariant 5), and raises
//!   the instance's [`Abandoned`] first, so that the core leaves the view it
//!   lent to that call (task table, queues, device views) to it for good and
//!   goes on with copies.
//!
//! The thread of an abandoned call is left as it is: threads cannot be
//! stopped from outside, and the plugin's code may hold locks or half-written
//! state. What that costs is in ARCHITECTURE.md (invariant 22). A policy
//! that is replaced normally ends its thread: the thread sees its channel
//! close, drops the policy object there (a plugin's destructor runs off the
//! engine thread too) and returns.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use gpu_agent_core::policy::{Abandoned, PolicyInstance};
use gpu_agent_loader::{Plugin, PluginError};
use gpu_agent_plugin_api::{
    abi_stable::{
        sabi_trait::TD_Opaque,
        std_types::{RErr, RResult, RString, RVec},
    },
    DecisionNe, EventNe, Policy, PolicyBox, Policy_TO, View,
};

/// The budget of a policy call unless agent.toml says otherwise: a tenth of
/// the unit's `WatchdogSec=30s`, and some hundred times the slowest shipped
/// policy's decisions under overload.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(3);

/// What one policy call answers.
type Answer = RResult<RVec<DecisionNe>, RString>;

/// One call handed to the policy's thread.
struct Call {
    /// The view as the core lent it; see [`OnThread::on_event`] for why the
    /// erased lifetime is sound.
    view: View<'static>,
    event: EventNe,
}

// SAFETY: a `View` is shared references to plain data (tasks, keys, devices,
// static strings) that nothing changes while the call may read it (see
// `OnThread::on_event`), and an event is plain data; neither holds anything
// tied to a thread.
unsafe impl Send for Call {}

/// The engine's side of a policy on its thread.
struct OnThread {
    name: String,
    calls: mpsc::Sender<Call>,
    answers: mpsc::Receiver<Answer>,
    budget: Duration,
    abandoned: Abandoned,
}

impl Policy for OnThread {
    fn on_event(&mut self, view: &View<'_>, event: &EventNe) -> Answer {
        // SAFETY: the policy's thread reads the view only while the call is
        // under way. It ends with an answer received here, or with the
        // thread gone (the answer channel closed), before the core changes
        // anything again; or it is abandoned, and then `Abandoned` is raised
        // before this returns, and the core never changes or frees what the
        // view shows (`Core::retire_lent`).
        let view: View<'static> = unsafe { std::mem::transmute::<View<'_>, View<'static>>(*view) };
        let call = Call {
            view,
            event: event.clone(),
        };
        if self.calls.send(call).is_err() {
            return RErr(format!("policy {}: its thread has ended", self.name).into());
        }
        match self.answers.recv_timeout(self.budget) {
            Ok(answer) => answer,
            Err(RecvTimeoutError::Timeout) => {
                self.abandoned.raise();
                RErr(format!(
                    "did not answer within {} ms (policy_budget_ms); the call is abandoned on its thread",
                    self.budget.as_millis()
                )
                .into())
            }
            Err(RecvTimeoutError::Disconnected) => {
                RErr(format!("policy {}: its thread has ended", self.name).into())
            }
        }
    }
}

/// Builds `plugin`'s policy with `params` on a thread of its own, and
/// returns it as an instance whose every call is handed to that thread and
/// bounded by `budget`. A constructor that errs, or that does not return
/// within `budget`, is [`PluginError::Instantiate`].
pub fn start(
    plugin: Plugin,
    params: Vec<(String, String)>,
    budget: Duration,
) -> Result<PolicyInstance, PluginError> {
    let name = plugin.name().to_string();
    let fail = |reason: String| PluginError::Instantiate {
        policy: name.clone(),
        reason,
    };
    let (calls, inbox) = mpsc::channel::<Call>();
    let (answer, answers) = mpsc::channel::<Answer>();
    let (built, ready) = mpsc::sync_channel::<Result<(), PluginError>>(1);
    std::thread::Builder::new()
        .name(format!("policy {name}"))
        .spawn(move || {
            let mut policy: PolicyBox = match plugin.instantiate(&params) {
                Ok(instance) => instance.policy,
                Err(e) => {
                    let _ = built.send(Err(e));
                    return;
                }
            };
            if built.send(Ok(())).is_err() {
                return; // given up on while it was being built
            }
            while let Ok(call) = inbox.recv() {
                let reply = policy.on_event(&call.view, &call.event);
                if answer.send(reply).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| fail(format!("cannot start its thread: {e}")))?;
    match ready.recv_timeout(budget) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(RecvTimeoutError::Timeout) => {
            return Err(fail(format!(
                "its constructor did not return within {} ms (policy_budget_ms); abandoned on its thread",
                budget.as_millis()
            )))
        }
        Err(RecvTimeoutError::Disconnected) => {
            return Err(fail("its thread ended while building it".into()))
        }
    }
    let abandoned = Abandoned::default();
    let on_thread = OnThread {
        name: name.clone(),
        calls,
        answers,
        budget,
        abandoned: abandoned.clone(),
    };
    Ok(PolicyInstance {
        name,
        policy: Policy_TO::from_value(on_thread, TD_Opaque),
        abandoned,
    })
}

/// A policy fault as stored (`meta` [`Fault::META_KEY`]): the policy is not
/// made active again at a start, only by an admin's `SetPolicy`, which
/// clears it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fault {
    /// The policy that failed.
    pub policy: String,
    /// Why.
    pub reason: String,
}

impl Fault {
    /// Where it is stored; an empty value is none.
    pub const META_KEY: &'static str = "policy_fault";

    /// The stored fault, if one is (an unreadable one is reported and
    /// taken as none).
    pub fn stored(store: &crate::store::Store) -> Result<Option<Fault>, crate::store::StoreError> {
        let Some(text) = store.meta(Fault::META_KEY)?.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        Ok(serde_json::from_str(&text)
            .map_err(|e| log::warn!("the stored policy fault is unreadable ({e}): {text:?}"))
            .ok())
    }

    /// The value stored for it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("two strings serialise")
    }

    /// How it reads in the log, the `PolicyFault` property and the status.
    pub fn describe(&self) -> String {
        format!("policy {} failed: {}", self.policy, self.reason)
    }
}
