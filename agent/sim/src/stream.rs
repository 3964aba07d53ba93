//! Reading a trace beside its replay: a second thread reads and checks the
//! trace ([`Trace::load`], whole, as ever) and hands each good row to the
//! replay as soon as it is read, so that reading and replaying overlap.
//!
//! The rows go over a bounded channel in chunks, while they are in arrival
//! order (as most traces are); the replay submits them as they come. The
//! stream is cut (the replay stops and its result is dropped) at the first
//! row that arrives before the one above it, and at a bad row; the reader
//! goes on to the trace's end either way, so the trace (or its first
//! error, the same as [`Trace::load`]'s) is the reader's result: a trace
//! that is not in order replays from it afterwards, and a bad one runs
//! nothing the user sees.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

use gpu_agent_core::apps::AppLibrary;
use gpu_agent_core::host::Host;
use gpu_agent_core::task::TaskSpec;
use gpu_agent_plugin_api::AppModel;

use crate::input::trace::{RowSink, Trace, TraceTask};
use crate::input::InputError;

/// Rows per message.
const CHUNK: usize = 1024;
/// Messages in flight (the reader waits beyond): at most about
/// `CHUNK * IN_FLIGHT` rows are copied and not yet replayed.
const IN_FLIGHT: usize = 8;

/// One row as the replay takes it.
pub(crate) struct Arrival {
    pub spec: TaskSpec,
    /// The trace's `actual` column.
    pub actual: Option<f64>,
}

/// One row on its way to the replay: its task without the parts on the
/// heap that every row has (its id is in its chunk's text, its profile in
/// the library), so that the replay's thread makes them (the allocator is
/// fastest where a block is made and freed in the same thread).
struct Row<'a> {
    /// The task, with an empty id and the default profile.
    spec: Partial,
    /// Where its id is in [`Chunk::ids`].
    id: std::ops::Range<usize>,
    app: &'a AppModel,
    actual: Option<f64>,
}

/// A [`TaskSpec`] less its id and profile.
struct Partial {
    arrival: f64,
    workload: f64,
    mem_gb: f64,
    deadline: f64,
    weight: f64,
    gpus: u32,
    alt_gpus: Vec<u32>,
    runtimes: Vec<f64>,
}

/// Rows read together.
struct Chunk<'a> {
    rows: Vec<Row<'a>>,
    /// Their ids, one after the other.
    ids: String,
}

enum Message<'a> {
    /// The trace's warnings, and at most how many rows it has.
    Header(Vec<String>, usize),
    Rows(Chunk<'a>),
    /// Every row was read and the trace is good.
    End,
}

/// The replay's end of a trace being read ([`read`]).
pub struct Stream<'a> {
    receiver: Receiver<Message<'a>>,
    rows: std::vec::IntoIter<Row<'a>>,
    ids: String,
    header: Option<(Vec<String>, usize)>,
    ended: bool,
}

/// The stream is cut: the trace is bad or not in arrival order (the reader's
/// result says which).
#[derive(Debug)]
pub(crate) struct Cut;

/// Starts reading the trace at `path` (checked against `host` and `apps`) in
/// a thread of `scope`: returns the stream of its rows for
/// [`crate::simulate_stream`], and the reader, whose result is
/// [`Trace::load`]'s. Drop the stream before joining the reader.
pub fn read<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    path: &'env Path,
    host: &'env Host,
    apps: &'env AppLibrary,
) -> (
    Stream<'env>,
    ScopedJoinHandle<'scope, Result<Trace, InputError>>,
) {
    let (sender, receiver) = sync_channel(IN_FLIGHT);
    let reader = scope.spawn(move || {
        let mut feed = Feed {
            sender: Some(sender),
            chunk: Chunk::new(),
            last: f64::NEG_INFINITY,
            apps,
            app: None,
        };
        let trace = Trace::load_into(path, host, apps, &mut feed)?;
        feed.flush();
        feed.send(Message::End);
        Ok(trace)
    });
    let stream = Stream {
        receiver,
        rows: Vec::new().into_iter(),
        ids: String::new(),
        header: None,
        ended: false,
    };
    (stream, reader)
}

impl Stream<'_> {
    /// The trace's warnings (its unknown columns), once its header is read;
    /// `None` when the stream is cut before (a bad header: the reader's
    /// result says why).
    pub fn warnings(&mut self) -> Option<&[String]> {
        self.header().ok().map(|(warnings, _)| warnings.as_slice())
    }

    /// At most how many tasks the trace has (its lines), once its header is
    /// read; `None` as for [`Stream::warnings`].
    pub fn rows(&mut self) -> Option<usize> {
        self.header().ok().map(|&(_, rows)| rows)
    }

    fn header(&mut self) -> Result<&(Vec<String>, usize), Cut> {
        if self.header.is_none() {
            match self.receiver.recv() {
                Ok(Message::Header(warnings, rows)) => self.header = Some((warnings, rows)),
                _ => return Err(Cut),
            }
        }
        Ok(self.header.as_ref().expect("just read"))
    }

    /// The next row's arrival time, `None` after the last row of a good
    /// trace; waits for the reader.
    pub(crate) fn peek(&mut self) -> Result<Option<f64>, Cut> {
        self.header()?;
        loop {
            if let Some(row) = self.rows.as_slice().first() {
                return Ok(Some(row.spec.arrival));
            }
            if self.ended {
                return Ok(None);
            }
            match self.receiver.recv() {
                Ok(Message::Rows(chunk)) => {
                    self.rows = chunk.rows.into_iter();
                    self.ids = chunk.ids;
                }
                Ok(Message::End) => self.ended = true,
                Ok(Message::Header(..)) | Err(_) => return Err(Cut),
            }
        }
    }

    /// The row [`Stream::peek`] saw.
    pub(crate) fn take(&mut self) -> Arrival {
        let Row {
            spec,
            id,
            app,
            actual,
        } = self.rows.next().expect("peeked");
        Arrival {
            spec: TaskSpec {
                id: self.ids[id].to_string(),
                arrival: spec.arrival,
                workload: spec.workload,
                mem_gb: spec.mem_gb,
                deadline: spec.deadline,
                weight: spec.weight,
                gpus: spec.gpus,
                alt_gpus: spec.alt_gpus,
                runtimes: spec.runtimes,
                app: app.clone(),
            },
            actual,
        }
    }
}

impl Chunk<'_> {
    fn new() -> Self {
        Chunk {
            rows: Vec::with_capacity(CHUNK),
            ids: String::with_capacity(CHUNK * 8),
        }
    }
}

/// The reader's end.
struct Feed<'a> {
    /// `None` once the stream is cut.
    sender: Option<SyncSender<Message<'a>>>,
    chunk: Chunk<'a>,
    /// The last row's arrival.
    last: f64,
    apps: &'a AppLibrary,
    /// The last row's profile.
    app: Option<&'a AppModel>,
}

impl<'a> Feed<'a> {
    fn send(&mut self, message: Message<'a>) {
        if let Some(sender) = &self.sender {
            if sender.send(message).is_err() {
                // The replay is gone: read on for the trace alone.
                self.sender = None;
            }
        }
    }

    fn flush(&mut self) {
        if !self.chunk.rows.is_empty() {
            let chunk = std::mem::replace(&mut self.chunk, Chunk::new());
            self.send(Message::Rows(chunk));
        }
    }
}

impl RowSink for Feed<'_> {
    fn header(&mut self, warnings: &[String], rows: usize) {
        self.send(Message::Header(warnings.to_vec(), rows));
    }

    fn row(&mut self, task: &TraceTask) {
        if self.sender.is_none() {
            return;
        }
        let spec = &task.spec;
        // Ties keep the trace's order, as the replay's arrival order does.
        if spec.arrival.total_cmp(&self.last).is_lt() {
            self.sender = None;
            return;
        }
        self.last = spec.arrival;
        let app = match self.app {
            Some(app) if app.name == spec.app.name => app,
            _ => self
                .apps
                .get(spec.app.name.as_str())
                .expect("the trace reader takes profiles from the library"),
        };
        self.app = Some(app);
        let ids = &mut self.chunk.ids;
        let from = ids.len();
        ids.push_str(&spec.id);
        self.chunk.rows.push(Row {
            spec: Partial {
                arrival: spec.arrival,
                workload: spec.workload,
                mem_gb: spec.mem_gb,
                deadline: spec.deadline,
                weight: spec.weight,
                gpus: spec.gpus,
                alt_gpus: spec.alt_gpus.clone(),
                runtimes: spec.runtimes.clone(),
            },
            id: from..ids.len(),
            app,
            actual: task.actual,
        });
        if self.chunk.rows.len() == CHUNK {
            self.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::replay::{simulate_stream, simulate_with, Options, Outcome};
    use gpu_agent_core::policy::builtin_fifo;

    fn host() -> Host {
        crate::input::host::parse(
            Path::new("host.toml"),
            "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n[[gpu]]\nmodel = \"V100-SXM2-32GB\"\nspeed = 0.6\n",
        )
        .unwrap()
    }

    /// `rows` rows (more than a chunk), arrivals from `arrival(i)`.
    fn trace_file(rows: usize, arrival: impl Fn(usize) -> f64) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            file,
            "id,arrival,workload,mem_gb,deadline,weight,gpus,extra"
        )
        .unwrap();
        for i in 0..rows {
            let gpus = if i % 7 == 0 { 2 } else { 1 };
            let a = arrival(i);
            writeln!(
                file,
                "t{i},{a},{},4,{},{},{gpus},x",
                1.0 + (i % 13) as f64 * 0.71,
                a + 5.0,
                1 + i % 3
            )
            .unwrap();
        }
        file
    }

    /// The stream's replay (or `None`, cut), the reader's result and the
    /// warnings the stream gave.
    fn streamed(
        path: &Path,
        host: &Host,
    ) -> (Option<Outcome>, Result<Trace, String>, Option<Vec<String>>) {
        let apps = AppLibrary::default();
        std::thread::scope(|scope| {
            let (mut stream, reader) = read(scope, path, host, &apps);
            let warnings = stream.warnings().map(<[String]>::to_vec);
            let outcome =
                simulate_stream(host, stream, builtin_fifo(), &Options::default(), |_| {}).unwrap();
            let trace = reader.join().unwrap().map_err(|e| e.to_string());
            (outcome, trace, warnings)
        })
    }

    #[test]
    fn a_trace_in_order_replays_as_it_is_read_as_from_memory() {
        let host = host();
        let file = trace_file(3 * CHUNK + 17, |i| (i / 3) as f64 * 0.37);
        let (outcome, trace, warnings) = streamed(file.path(), &host);
        let trace = trace.unwrap();
        let loaded = Trace::load(file.path(), &host, &AppLibrary::default()).unwrap();
        assert_eq!(trace.tasks, loaded.tasks);
        assert_eq!(warnings.as_deref(), Some(loaded.warnings.as_slice()));
        assert_eq!(warnings.unwrap().len(), 1);
        let outcome = outcome.expect("not cut");
        let from_memory =
            simulate_with(&host, &loaded, builtin_fifo(), &Options::default(), |_| {}).unwrap();
        assert_eq!(outcome.metrics, from_memory.metrics);
        assert_eq!(outcome.schedule, from_memory.schedule);
        assert_eq!(outcome.metrics.tasks, 3 * CHUNK + 17);
    }

    #[test]
    fn a_trace_out_of_order_is_cut_and_read_whole() {
        let host = host();
        // Row 600 arrives before row 599.
        let file = trace_file(2 * CHUNK + 100, |i| if i == 600 { 1.0 } else { i as f64 });
        let (outcome, trace, _) = streamed(file.path(), &host);
        assert!(outcome.is_none());
        assert_eq!(trace.unwrap().tasks.len(), 2 * CHUNK + 100);
    }

    #[test]
    fn a_bad_trace_is_cut_with_the_readers_error() {
        let host = host();
        let file = trace_file(2 * CHUNK, |i| i as f64);
        let mut text = std::fs::read_to_string(file.path()).unwrap();
        // A duplicate id at the end (found once every row is read), then a
        // bad header.
        text.push_str("t5,999,1,4,1000,1,1,x\n");
        for bad in [text.clone(), text.replacen("id,", "name,", 1)] {
            let mut file = tempfile::NamedTempFile::new().unwrap();
            file.write_all(bad.as_bytes()).unwrap();
            let (outcome, trace, warnings) = streamed(file.path(), &host);
            let expected = Trace::load(file.path(), &host, &AppLibrary::default()).unwrap_err();
            assert!(outcome.is_none());
            assert_eq!(trace.unwrap_err(), expected.to_string());
            assert_eq!(warnings.is_none(), bad.starts_with("name"));
        }
    }
}
