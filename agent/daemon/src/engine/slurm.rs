//! Adopted Slurm jobs checked with Slurm, so that an adoption ends when its
//! job does even if the epilog never reached the agent (docs/slurm.md,
//! "When the epilog never reaches the agent").
//!
//! A thread of its own (never the engine thread: the command can take its
//! timeout) asks the engine for the adopted jobs at start and every
//! `[slurm] check_interval_s` (`Request::SlurmTick`), runs the configured
//! command on their ids, at most `check_timeout_s`, and reports what Slurm
//! said (`Request::SlurmChecked`). The engine releases the adoptions of
//! jobs that ended, recording their end, and, when Slurm could not be
//! asked, those whose deadline plus `lease_grace_s` has passed. An `Adopt`
//! that finds a GPU held by a Slurm job's adoption waits for a check of
//! that job first.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use gpu_agent_dbus::{AdoptSpec, ReleaseEnd, TaskInfo, TaskStatus};

use super::requests::stopping;
use super::{Engine, Reply, Request, Round};
use crate::config::SlurmSettings;

/// The external id prefix of a Slurm job's adoption (`slurm:JOBID`).
const PREFIX: &str = "slurm:";

/// The Slurm job id of an adoption's external id, if it is a job's.
pub(super) fn job_of(external_id: &str) -> Option<u64> {
    external_id.strip_prefix(PREFIX)?.parse().ok()
}

/// What Slurm says of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Pending, running, suspended or completing (its epilog's turn).
    Runs,
    /// Ended, as its state says.
    Ended(ReleaseEnd),
    /// Slurm no longer knows it (ended longer ago than its `MinJobAge`).
    Unknown,
}

/// The answer of one check: each job asked with its state, or why Slurm
/// could not be asked.
pub type Answer = Result<Vec<(u64, JobState)>, String>;

/// The thread that checks jobs with Slurm.
pub(super) struct Checker {
    jobs: mpsc::Sender<Vec<u64>>,
}

impl Checker {
    /// Starts the thread; it asks for the jobs at once and then every
    /// interval, and reports to `inbox`.
    pub(super) fn start(settings: SlurmSettings, inbox: mpsc::Sender<Request>) -> Checker {
        let (jobs, rx) = mpsc::channel::<Vec<u64>>();
        let interval = settings.check_interval_s.duration();
        let spawned = std::thread::Builder::new()
            .name("slurm-check".into())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    let now = Instant::now();
                    if now >= next {
                        next = now + interval;
                        if inbox.send(Request::SlurmTick).is_err() {
                            return;
                        }
                    }
                    match rx.recv_timeout(next.saturating_duration_since(now)) {
                        Ok(asked) => {
                            let answer = check(&settings, &asked);
                            if inbox.send(Request::SlurmChecked { answer }).is_err() {
                                return;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            });
        if let Err(e) = spawned {
            log::error!(
                "cannot start the Slurm check thread ({e}); adoptions end by their lease only"
            );
        }
        Checker { jobs }
    }

    /// Asks Slurm about `jobs` (answered with `Request::SlurmChecked`).
    pub(super) fn ask(&self, jobs: Vec<u64>) -> bool {
        self.jobs.send(jobs).is_ok()
    }
}

impl Engine {
    /// `Request::SlurmTick`: asks Slurm about every adopted Slurm job, and
    /// ends the adoptions of other work whose lease ran out.
    pub(super) fn slurm_tick(&mut self, round: &mut Round) {
        if self.stopping {
            return;
        }
        self.end_leases(false, "it is no Slurm job's", round);
        let jobs: Vec<u64> = self.adopted_jobs().into_iter().map(|(_, j)| j).collect();
        if !jobs.is_empty() {
            self.slurm.ask(jobs);
        }
    }

    /// `Request::SlurmChecked`: releases the adoptions of the jobs Slurm
    /// says ended (or, when it could not be asked, those whose lease ran
    /// out), then carries out the `Adopt`s that waited for it.
    pub(super) fn slurm_checked(&mut self, answer: Answer, round: &mut Round) {
        if self.stopping {
            for (_, spec, reply) in std::mem::take(&mut self.parked_adopts) {
                let what = format!("{} was not adopted", spec.external_id);
                round.reply(reply, Err(stopping(&what)));
            }
            return;
        }
        match answer {
            Ok(states) => {
                let adopted = self.adopted_jobs();
                for (job, state) in states {
                    let Some((id, _)) = adopted.iter().find(|(_, j)| *j == job) else {
                        continue;
                    };
                    let (status, reason) = match state {
                        JobState::Runs => continue,
                        JobState::Ended(end) => {
                            let (status, reason) = end.outcome();
                            let reason = reason.unwrap_or(end.as_str());
                            (status, format!("{reason}: Slurm says job {job} ended"))
                        }
                        JobState::Unknown => (
                            TaskStatus::Lost,
                            format!("Slurm no longer knows job {job}: it ended, how is unknown"),
                        ),
                    };
                    log::warn!(
                        "task {id} (slurm:{job}): released as {status}, its job no longer runs \
                         ({reason}; its epilog never released it)"
                    );
                    self.end_adopted(id, status, Some(reason), round);
                }
            }
            Err(why) => {
                log::warn!("cannot ask Slurm whether the adopted jobs still run: {why}");
                self.end_leases(true, "Slurm cannot be asked", round);
            }
        }
        for (id, spec, reply) in std::mem::take(&mut self.parked_adopts) {
            let result = self.adopt(id, spec, round);
            round.reply(reply, result);
        }
    }

    /// Holds back an `Adopt` of GPUs that other Slurm jobs' adoptions hold
    /// until Slurm says whether those jobs still run; gives it back when
    /// there is nothing to ask.
    pub(super) fn park_adopt(
        &mut self,
        id: String,
        spec: AdoptSpec,
        reply: Reply<String>,
    ) -> Option<(String, AdoptSpec, Reply<String>)> {
        let holders: Vec<u64> = self
            .adopted_jobs()
            .into_iter()
            .filter(|(id, _)| {
                self.tasks.find(id).is_some_and(|(t, _)| {
                    t.spec.external_id != spec.external_id
                        && t.devices.iter().any(|d| spec.devices.contains(d))
                })
            })
            .map(|(_, job)| job)
            .collect();
        if holders.is_empty() || !self.slurm.ask(holders.clone()) {
            return Some((id, spec, reply));
        }
        log::info!(
            "{}: its GPUs {:?} are adopted for Slurm job(s) {holders:?}; asking Slurm whether they still run",
            spec.external_id,
            spec.devices
        );
        self.parked_adopts.push((id, spec, reply));
        None
    }

    /// The adopted tasks that are Slurm jobs': (task id, job id).
    fn adopted_jobs(&self) -> Vec<(String, u64)> {
        let mut jobs: Vec<(String, u64)> = self
            .tasks
            .adopted()
            .filter_map(|t| Some((t.id.clone(), job_of(&t.spec.external_id)?)))
            .collect();
        jobs.sort();
        jobs
    }

    /// Ends the adoptions (Slurm jobs' when `slurm`, the others' otherwise)
    /// whose deadline plus `lease_grace_s` has passed.
    fn end_leases(&mut self, slurm: bool, why: &str, round: &mut Round) {
        let grace = self.config.slurm.lease_grace_s.as_secs_f64();
        let now = self.time.unix_now();
        let mut ended: Vec<String> = self
            .tasks
            .adopted()
            .filter(|t| {
                job_of(&t.spec.external_id).is_some() == slurm && deadline(t) + grace <= now
            })
            .map(|t| t.id.clone())
            .collect();
        ended.sort();
        for id in ended {
            let reason = format!(
                "lease ended: its deadline plus lease_grace_s ({grace} s) passed and {why}"
            );
            log::warn!("task {id}: released as lost; {reason}");
            self.end_adopted(&id, TaskStatus::Lost, Some(reason), round);
        }
    }
}

/// The deadline of adopted task `t` (Unix seconds; adopted tasks always
/// have one, and one without reads as past).
pub(super) fn deadline(t: &TaskInfo) -> f64 {
    t.started.unwrap_or(t.submitted) + t.spec.deadline.unwrap_or(0.0)
}

/// Runs the check command on `jobs`.
fn check(settings: &SlurmSettings, jobs: &[u64]) -> Answer {
    let ids = jobs
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let argv: Vec<String> = settings
        .check_command
        .iter()
        .map(|a| a.replace("{jobs}", &ids))
        .collect();
    let shown = argv.join(" ");
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    // Read both pipes off this thread's wait so that a chatty command
    // cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let limit = settings.check_timeout_s.duration();
    let status = match wait_timeout::ChildExt::wait_timeout(&mut child, limit) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{shown}: no answer within {} s",
                limit.as_secs_f64()
            ));
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    parse(jobs, status.success(), &out, &err).map_err(|why| format!("{shown}: {why}"))
}

/// What the check command's output says of `jobs`: with success, a line
/// `JOBID STATE` per job Slurm knows (a job missing is one Slurm forgot);
/// squeue's failure for a single forgotten job ("Invalid job id
/// specified") says the same; any other failure is Slurm not answering.
pub(super) fn parse(jobs: &[u64], success: bool, out: &str, err: &str) -> Answer {
    if !success {
        return if err.contains("Invalid job id specified") {
            Ok(jobs.iter().map(|&j| (j, JobState::Unknown)).collect())
        } else {
            Err(match err.trim() {
                "" => "failed with no message".to_string(),
                err => format!("failed: {err}"),
            })
        };
    }
    let mut said = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let (Some(id), Some(state)) = (words.next(), words.next()) else {
            return Err(format!("expected \"JOBID STATE\", got {line:?}"));
        };
        let Ok(id) = id.parse::<u64>() else {
            return Err(format!("expected a job id, got {id:?} in {line:?}"));
        };
        said.push((
            id,
            state_of(state).ok_or_else(|| format!("unknown job state {state:?}"))?,
        ));
    }
    Ok(jobs
        .iter()
        .map(|&j| {
            let state = said.iter().find(|(id, _)| *id == j).map(|&(_, s)| s);
            (j, state.unwrap_or(JobState::Unknown))
        })
        .collect())
}

/// A Slurm job state name (squeue's `%T`) as the adoption sees it.
fn state_of(name: &str) -> Option<JobState> {
    Some(match name {
        "PENDING" | "RUNNING" | "SUSPENDED" | "COMPLETING" | "CONFIGURING" | "RESIZING"
        | "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" | "RESV_DEL_HOLD" | "SIGNALING"
        | "STAGE_OUT" | "STOPPED" | "SPECIAL_EXIT" => JobState::Runs,
        "COMPLETED" => JobState::Ended(ReleaseEnd::Completed),
        "CANCELLED" => JobState::Ended(ReleaseEnd::Cancelled),
        "TIMEOUT" | "DEADLINE" => JobState::Ended(ReleaseEnd::Timeout),
        "FAILED" | "NODE_FAIL" | "OUT_OF_MEMORY" | "BOOT_FAIL" | "PREEMPTED" | "REVOKED" => {
            JobState::Ended(ReleaseEnd::Failed)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_output_reads_as_each_jobs_state() {
        let out = "12 RUNNING\n13 CANCELLED\n14 TIMEOUT\n15 FAILED\n16 COMPLETED\n17 COMPLETING\n";
        assert_eq!(
            parse(&[12, 13, 14, 15, 16, 17, 18], true, out, ""),
            Ok(vec![
                (12, JobState::Runs),
                (13, JobState::Ended(ReleaseEnd::Cancelled)),
                (14, JobState::Ended(ReleaseEnd::Timeout)),
                (15, JobState::Ended(ReleaseEnd::Failed)),
                (16, JobState::Ended(ReleaseEnd::Completed)),
                (17, JobState::Runs),
                (18, JobState::Unknown),
            ])
        );
        assert_eq!(
            parse(
                &[9],
                false,
                "",
                "slurm_load_jobs error: Invalid job id specified\n"
            ),
            Ok(vec![(9, JobState::Unknown)])
        );
        assert_eq!(
            parse(
                &[9],
                false,
                "",
                "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
            ),
            Err("failed: slurm_load_jobs error: Unable to contact slurm controller (connect failure)".into())
        );
        assert!(parse(&[9], true, "9 WEIRD\n", "").is_err());
        assert!(parse(&[9], true, "9\n", "").is_err());
    }

    #[test]
    fn a_command_that_hangs_or_is_missing_is_slurm_not_answering() {
        let settings = |command: &[&str]| SlurmSettings {
            check_command: command.iter().map(|s| s.to_string()).collect(),
            check_timeout_s: crate::config::Seconds::new(1.0).unwrap(),
            ..SlurmSettings::default()
        };
        let hangs = check(&settings(&["sleep", "30"]), &[1]).unwrap_err();
        assert!(hangs.contains("no answer within 1 s"), "{hangs}");
        let missing = check(&settings(&["/nonexistent/squeue"]), &[1]).unwrap_err();
        assert!(missing.starts_with("/nonexistent/squeue: "), "{missing}");
        let said = check(&settings(&["echo", "{jobs} RUNNING"]), &[4, 5]).unwrap_err();
        assert_eq!(
            said,
            "echo 4,5 RUNNING: expected a job id, got \"4,5\" in \"4,5 RUNNING\""
        );
        let said = check(&settings(&["true"]), &[4, 5]).unwrap();
        assert_eq!(said, vec![(4, JobState::Unknown), (5, JobState::Unknown)]);
        let said = check(
            &settings(&["printf", "4 RUNNING\\n5 CANCELLED\\n"]),
            &[4, 5],
        )
        .unwrap();
        assert_eq!(
            said,
            vec![
                (4, JobState::Runs),
                (5, JobState::Ended(ReleaseEnd::Cancelled))
            ]
        );
    }
}
