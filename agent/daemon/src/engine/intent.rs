//! Requests that change state are stored before they are carried out.
//!
//! A client request that changes state (`Cancel`, `SetPolicy`,
//! `SetDeviceOnline`, `Adopt`, `Release`, `ApplyMigConfig`,
//! `CancelMigChange`) is first written as an intent, in a write of its own,
//! and carried out only once that write succeeded; a refused write answers
//! `Failed` and changes nothing, in memory either (`Submit` follows the same
//! rule through its own first write, the new task itself). What the request
//! changed is then written with the round's other changes, in the batch that
//! also deletes every intent carried out so far ([`Op::ClearIntents`]). When
//! that batch cannot be written (a full disk), its changes wait in `unsaved`
//! while the intents stay stored; the round still answers after its sync, and
//! a start carries out the stored intents again, in order, on what reached
//! the disk ([`Engine::replay_intents`]): so an answered request is never
//! lost to a failed write. A request its handler refused is replayed too, and
//! meets the state it was refused in but for changes never acknowledged.

use gpu_agent_dbus::{AdoptSpec, AgentError, ParamValue, ReleaseEnd};
use serde::{Deserialize, Serialize};

use super::mig_apply::{self, MigOptions, MigTarget};
use super::{Caller, Engine, Request, Round};
use crate::store::{Op, StoreError};

/// A request that changes state, as stored (the `intents` table, JSON).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub(super) enum Intent {
    Cancel {
        id: String,
        caller: Caller,
    },
    SetPolicy {
        name: String,
        params: Vec<(String, ParamValue)>,
    },
    SetDeviceOnline {
        gpu: u32,
        online: bool,
    },
    Adopt {
        /// The id the adoption answers with, given before it is stored.
        id: String,
        spec: AdoptSpec,
    },
    Release {
        id: String,
        /// Absent in intents stored before `ReleaseWithEnd`: `completed`.
        #[serde(default)]
        end: ReleaseEnd,
    },
    ApplyMig {
        /// Each GPU with its layout as text (`3g.20gb@0, 3g.20gb@4`).
        targets: Vec<(u32, String)>,
        options: MigOptions,
    },
    CancelMig {
        gpu: u32,
    },
}

/// An answer that goes nowhere: a request carried out again at start.
fn nobody<T>() -> super::Reply<T> {
    tokio::sync::oneshot::channel().0
}

impl Engine {
    /// Handles a client request as part of `round`, storing it first when
    /// it changes state: a request whose intent cannot be stored is answered
    /// `Failed` and not carried out.
    pub(super) fn serve_stored(&mut self, mut request: Request, round: &mut Round) {
        if let Some(intent) = self.intent_of(&mut request) {
            let text = serde_json::to_string(&intent).expect("an intent serialises");
            match self.store.put_intent(&text) {
                Ok(seq) => self.intents_through = Some(seq),
                Err(e) => {
                    log::error!("cannot store a request, refused: {e}");
                    let error = AgentError::Failed(format!(
                        "cannot store the request ({e}); nothing was changed"
                    ));
                    return refuse(request, error, round);
                }
            }
        }
        self.serve(request, round);
    }

    /// What `request` would store before it is carried out, if it changes
    /// state; an adoption is given its task id here.
    fn intent_of(&mut self, request: &mut Request) -> Option<Intent> {
        Some(match request {
            Request::Cancel { id, caller, .. } => Intent::Cancel {
                id: id.clone(),
                caller: *caller,
            },
            Request::SetPolicy { name, params, .. } => Intent::SetPolicy {
                name: name.clone(),
                params: params.clone(),
            },
            Request::SetDeviceOnline { gpu, online, .. } => Intent::SetDeviceOnline {
                gpu: *gpu,
                online: *online,
            },
            Request::Adopt { id, spec, .. } => Intent::Adopt {
                id: id.get_or_insert_with(|| self.store.next_id()).clone(),
                spec: spec.clone(),
            },
            Request::Release { id, end, .. } => Intent::Release {
                id: id.clone(),
                end: *end,
            },
            Request::ApplyMig {
                targets, options, ..
            } => Intent::ApplyMig {
                targets: targets
                    .iter()
                    .map(|t| (t.gpu, mig_apply::describe_as(&t.layout, t.enabled)))
                    .collect(),
                options: *options,
            },
            Request::CancelMig { gpu, .. } => Intent::CancelMig { gpu: *gpu },
            _ => return None,
        })
    }

    /// The request `intent` stored, answered to nobody.
    fn request_of(&self, intent: Intent) -> Result<Request, String> {
        Ok(match intent {
            Intent::Cancel { id, caller } => Request::Cancel {
                id,
                caller,
                reply: nobody(),
            },
            Intent::SetPolicy { name, params } => Request::SetPolicy {
                name,
                params,
                reply: nobody(),
            },
            Intent::SetDeviceOnline { gpu, online } => Request::SetDeviceOnline {
                gpu,
                online,
                reply: nobody(),
            },
            Intent::Adopt { id, spec } => Request::Adopt {
                id: Some(id),
                spec,
                reply: nobody(),
            },
            Intent::Release { id, end } => Request::Release {
                id,
                end,
                reply: nobody(),
            },
            Intent::ApplyMig { targets, options } => Request::ApplyMig {
                targets: targets
                    .into_iter()
                    .map(|(gpu, text)| {
                        let layout = self.layout_of_text(gpu, &text)?;
                        let enabled = text != mig_apply::describe(&[]);
                        Ok(MigTarget {
                            gpu,
                            enabled,
                            layout,
                        })
                    })
                    .collect::<Result<_, String>>()?,
                options,
                reply: nobody(),
            },
            Intent::CancelMig { gpu } => Request::CancelMig {
                gpu,
                reply: nobody(),
            },
        })
    }

    /// At start, once the tasks are restored: carries out again, in order,
    /// the requests a previous run stored and answered but whose changes it
    /// never wrote. The round that follows writes their changes and deletes
    /// them.
    pub(super) fn replay_intents(&mut self, round: &mut Round) -> Result<(), StoreError> {
        for (seq, text) in self.store.intents()? {
            self.intents_through = Some(seq);
            let request = serde_json::from_str(&text)
                .map_err(|e| e.to_string())
                .and_then(|intent| self.request_of(intent));
            match request {
                Ok(request) => {
                    log::warn!(
                        "carrying out again a request a previous run answered but did not \
                         finish storing: {text}"
                    );
                    self.serve(request, round);
                }
                Err(e) => log::error!("a stored request is unreadable ({e}), left out: {text}"),
            }
        }
        Ok(())
    }

    /// The batch's deletion of the intents carried out so far, once.
    pub(super) fn clear_intents(&mut self) -> Option<Op> {
        self.intents_through
            .map(|through| Op::ClearIntents { through })
    }
}

/// Answers `request` (one that changes state) with `error`.
fn refuse(request: Request, error: AgentError, round: &mut Round) {
    match request {
        Request::Cancel { reply, .. }
        | Request::SetPolicy { reply, .. }
        | Request::SetDeviceOnline { reply, .. }
        | Request::Release { reply, .. }
        | Request::CancelMig { reply, .. } => round.reply(reply, Err(error)),
        Request::Adopt { reply, .. } => round.reply(reply, Err(error)),
        Request::ApplyMig { reply, .. } => round.reply(reply, Err(error)),
        _ => unreachable!("only a request with an intent is refused for it"),
    }
}
