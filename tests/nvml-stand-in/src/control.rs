//! Faults and delays a test injects: lines appended to the control file named
//! by `NVML_FAKE_CONTROL`, read at every NVML call.
//!
//! ```text
//! xid GPU CODE                 the driver reports critical XID CODE on GPU
//! lost GPU                     GPU falls off the bus (GPU_IS_LOST from then on)
//! fail CALL CODE [after N]     the next CALL (after N that succeed) returns CODE
//! fail CALL CODE always        every CALL returns CODE until `clear`
//! delay CALL SECONDS           every CALL takes SECONDS first, until `clear`
//! deny-writes                  every write returns NO_PERMISSION (a caller
//!                              without the capability the driver checks)
//! allow-writes                 undoes deny-writes
//! clear                        removes every fail and delay
//! ```
//!
//! CALL is an NVML function name, CODE an `nvmlReturn_t` number. A line the
//! stand-in cannot read is reported on stderr, naming the file and line, and
//! skipped.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

/// Something a control line asks for at once.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// A critical XID on a GPU.
    Xid(u32, u64),
    /// A GPU lost.
    Lost(u32),
}

/// A failure waiting for its call.
#[derive(Debug, Clone, PartialEq)]
struct Failure {
    call: String,
    code: nvmlReturn_t,
    /// Calls still to succeed first; `None`: fails every time.
    after: Option<u32>,
}

/// What the control file has set so far.
#[derive(Debug, Default)]
struct State {
    /// Bytes of the file read so far.
    offset: u64,
    /// Lines read so far.
    line: usize,
    failures: Vec<Failure>,
    delays: Vec<(String, Duration)>,
    writes_denied: bool,
}

/// The control file and what it has set.
#[derive(Debug, Default)]
pub(crate) struct Control {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

impl Control {
    /// The control file named by `NVML_FAKE_CONTROL`, if any.
    pub(crate) fn from_env() -> Control {
        Control {
            path: std::env::var_os("NVML_FAKE_CONTROL").map(PathBuf::from),
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the lines appended since the last call; returns the events
    /// they ask for, in order.
    pub(crate) fn poll(&self) -> Vec<Event> {
        let Some(path) = &self.path else {
            return Vec::new();
        };
        let mut st = self.lock();
        let Ok(mut file) = File::open(path) else {
            return Vec::new();
        };
        let mut text = String::new();
        if file.seek(SeekFrom::Start(st.offset)).is_err() || file.read_to_string(&mut text).is_err()
        {
            return Vec::new();
        }
        // Only whole lines: a writer may be half-way through one.
        let Some(end) = text.rfind('\n') else {
            return Vec::new();
        };
        st.offset += end as u64 + 1;
        let mut events = Vec::new();
        for line in text[..end].lines() {
            st.line += 1;
            match parse(line) {
                Ok(Some(Line::Event(e))) => events.push(e),
                Ok(Some(Line::Fail(f))) => st.failures.push(f),
                Ok(Some(Line::Delay(call, d))) => st.delays.push((call, d)),
                Ok(Some(Line::Writes(denied))) => st.writes_denied = denied,
                Ok(Some(Line::Clear)) => {
                    st.failures.clear();
                    st.delays.clear();
                }
                Ok(None) => {}
                Err(why) => eprintln!(
                    "nvml stand-in: {}:{}: {why}: {line:?} (skipped)",
                    path.display(),
                    st.line
                ),
            }
        }
        events
    }

    /// How long `call` must take first.
    pub(crate) fn delay(&self, call: &str) -> Option<Duration> {
        let st = self.lock();
        st.delays.iter().find(|(c, _)| c == call).map(|&(_, d)| d)
    }

    /// The code `call` must fail with now, if any (counting it against an
    /// `after`); `is_write` calls fail with NO_PERMISSION under deny-writes.
    pub(crate) fn failure(&self, call: &str, is_write: bool) -> Option<nvmlReturn_t> {
        let mut st = self.lock();
        if is_write && st.writes_denied {
            return Some(nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION);
        }
        let at = st.failures.iter().position(|f| f.call == call)?;
        let failure = &mut st.failures[at];
        match &mut failure.after {
            None => Some(failure.code),
            Some(0) => Some(st.failures.remove(at).code),
            Some(n) => {
                *n -= 1;
                None
            }
        }
    }
}

/// One control line, read.
#[derive(Debug, PartialEq)]
enum Line {
    Event(Event),
    Fail(Failure),
    Delay(String, Duration),
    Writes(bool),
    Clear,
}

/// Reads one line; `None` for a blank line or a `#` comment.
fn parse(line: &str) -> Result<Option<Line>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |at: usize, what: &str| -> Result<u64, String> {
        let word = words.get(at).ok_or(format!("{what} missing"))?;
        word.parse()
            .map_err(|_| format!("{what} {word:?} is not a number"))
    };
    let gpu = |at: usize| -> Result<u32, String> {
        u32::try_from(number(at, "GPU")?).map_err(|_| "GPU out of range".to_string())
    };
    let call = |at: usize| -> Result<String, String> {
        match words.get(at) {
            Some(c) if c.starts_with("nvml") => Ok(c.to_string()),
            Some(c) => Err(format!("{c:?} is not an NVML function")),
            None => Err("NVML function missing".into()),
        }
    };
    let line = match words.as_slice() {
        [] => return Ok(None),
        [first, ..] if first.starts_with('#') => return Ok(None),
        ["xid", _, _] => Line::Event(Event::Xid(gpu(1)?, number(2, "XID")?)),
        ["lost", _] => Line::Event(Event::Lost(gpu(1)?)),
        ["fail", _, _, rest @ ..] => {
            let code = nvmlReturn_t::try_from(number(2, "code")?)
                .map_err(|_| "code out of range".to_string())?;
            let after = match rest {
                [] => Some(0),
                ["always"] => None,
                ["after", _] => Some(
                    u32::try_from(number(4, "count")?)
                        .map_err(|_| "count out of range".to_string())?,
                ),
                _ => return Err("expected nothing, `always` or `after N` after the code".into()),
            };
            Line::Fail(Failure {
                call: call(1)?,
                code,
                after,
            })
        }
        ["delay", _, seconds] => {
            let secs: f64 = seconds
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .ok_or(format!("seconds {seconds:?} is not a number >= 0"))?;
            Line::Delay(call(1)?, Duration::from_secs_f64(secs))
        }
        ["deny-writes"] => Line::Writes(true),
        ["allow-writes"] => Line::Writes(false),
        ["clear"] => Line::Clear,
        _ => return Err("not a control line".into()),
    };
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_lines_read_as_written() {
        assert_eq!(parse("xid 1 79"), Ok(Some(Line::Event(Event::Xid(1, 79)))));
        assert_eq!(parse("lost 0"), Ok(Some(Line::Event(Event::Lost(0)))));
        assert_eq!(
            parse("fail nvmlDeviceSetGpuLockedClocks 4 always"),
            Ok(Some(Line::Fail(Failure {
                call: "nvmlDeviceSetGpuLockedClocks".into(),
                code: 4,
                after: None
            })))
        );
        assert_eq!(
            parse("fail nvmlGpuInstanceCreateComputeInstance 23 after 2"),
            Ok(Some(Line::Fail(Failure {
                call: "nvmlGpuInstanceCreateComputeInstance".into(),
                code: 23,
                after: Some(2)
            })))
        );
        assert_eq!(
            parse("delay nvmlDeviceSetMigMode 60"),
            Ok(Some(Line::Delay(
                "nvmlDeviceSetMigMode".into(),
                Duration::from_secs(60)
            )))
        );
        assert_eq!(parse("  # a note"), Ok(None));
        assert_eq!(parse("deny-writes"), Ok(Some(Line::Writes(true))));
        assert_eq!(
            parse("xid one 79"),
            Err("GPU \"one\" is not a number".into())
        );
        assert_eq!(
            parse("fail SetClocks 4"),
            Err("\"SetClocks\" is not an NVML function".into())
        );
        assert_eq!(
            parse("delay nvmlDeviceSetMigMode -1"),
            Err("seconds \"-1\" is not a number >= 0".into())
        );
        assert_eq!(parse("reboot"), Err("not a control line".into()));
    }

    #[test]
    fn a_failure_waits_its_turn_and_fires_once_unless_always() {
        let control = Control::default();
        control.lock().failures.push(Failure {
            call: "nvmlX".into(),
            code: 23,
            after: Some(1),
        });
        assert_eq!(control.failure("nvmlY", false), None);
        assert_eq!(control.failure("nvmlX", false), None);
        assert_eq!(control.failure("nvmlX", false), Some(23));
        assert_eq!(control.failure("nvmlX", false), None);
        control.lock().failures.push(Failure {
            call: "nvmlX".into(),
            code: 4,
            after: None,
        });
        assert_eq!(control.failure("nvmlX", false), Some(4));
        assert_eq!(control.failure("nvmlX", false), Some(4));
        control.lock().writes_denied = true;
        assert_eq!(control.failure("nvmlW", true), Some(4));
        assert_eq!(control.failure("nvmlW", false), None);
    }

    #[test]
    fn the_file_is_read_a_whole_line_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control");
        std::fs::write(&path, "xid 0 79\nlost").unwrap();
        let control = Control {
            path: Some(path.clone()),
            state: Mutex::default(),
        };
        assert_eq!(control.poll(), vec![Event::Xid(0, 79)]);
        assert_eq!(control.poll(), vec![]);
        std::fs::write(&path, "xid 0 79\nlost 1\nbogus\ndelay nvmlX 2\n").unwrap();
        assert_eq!(control.poll(), vec![Event::Lost(1)]);
        assert_eq!(control.delay("nvmlX"), Some(Duration::from_secs(2)));
    }
}
