//! Workload traces (formats.md §1): CSV, one task a row.

use std::hash::BuildHasher;
use std::path::Path;

use hashbrown::DefaultHashBuilder;

use gpu_agent_core::apps::{AppLibrary, DEFAULT_APP};
use gpu_agent_core::host::Host;
use gpu_agent_core::task::{OnHost, Rule, TaskSpec, MAX_VALUE};

use super::InputError;

/// A loaded trace: tasks in file order.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The tasks, in file order.
    pub tasks: Vec<TraceTask>,
    /// Things worth telling the user that are not errors (unknown columns).
    pub warnings: Vec<String>,
}

/// One row of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceTask {
    /// The line it came from (1-based).
    pub line: u64,
    /// The task.
    pub spec: TaskSpec,
    /// What a real executor would run.
    pub command: Option<String>,
    /// The true run time on a speed-1 device at default clocks, when it
    /// differs from the estimate `workload` (the `actual` column): the
    /// simulator runs the task for `actual / workload` times its modelled
    /// time, while the core and the policy plan with the estimate.
    pub actual: Option<f64>,
}

const REQUIRED: [&str; 6] = ["id", "arrival", "workload", "mem_gb", "deadline", "weight"];
const OPTIONAL: [&str; 6] = ["gpus", "gpus_alt", "runtimes", "app", "command", "actual"];

impl Trace {
    /// Reads and checks a trace against `host` (for `runtimes`) and `apps`.
    pub fn load(path: &Path, host: &Host, apps: &AppLibrary) -> Result<Trace, InputError> {
        let text = std::fs::read(path)
            .map_err(|e| InputError::at(path, None, None, format!("cannot read: {e}")))?;
        // One row a line, less the header: room for every task at once.
        let rows = line_count(&text);
        Trace::parse_rows(path, text.as_slice(), rows, host, apps, &mut ())
    }

    /// [`Trace::load`], telling `sink` of the header and of each good row
    /// as it is read (the trace's errors are still only in the result: a
    /// row the sink saw may come before a bad one).
    pub(crate) fn load_into(
        path: &Path,
        host: &Host,
        apps: &AppLibrary,
        sink: &mut impl RowSink,
    ) -> Result<Trace, InputError> {
        let text = std::fs::read(path)
            .map_err(|e| InputError::at(path, None, None, format!("cannot read: {e}")))?;
        let rows = line_count(&text);
        Trace::parse_rows(path, text.as_slice(), rows, host, apps, sink)
    }

    /// Parses a trace from `reader`; `path` only names it in errors.
    pub fn parse(
        path: &Path,
        reader: impl std::io::Read,
        host: &Host,
        apps: &AppLibrary,
    ) -> Result<Trace, InputError> {
        Trace::parse_rows(path, reader, 0, host, apps, &mut ())
    }

    /// [`Trace::parse`] with room made for about `rows` tasks, telling
    /// `sink` what it reads.
    fn parse_rows(
        path: &Path,
        reader: impl std::io::Read,
        rows: usize,
        host: &Host,
        apps: &AppLibrary,
        sink: &mut impl RowSink,
    ) -> Result<Trace, InputError> {
        // Fields are trimmed and checked as UTF-8 one at a time, when read:
        // the reader's own trimming copies every record.
        let mut csv = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .from_reader(reader);
        let headers: Vec<String> = csv
            .headers()
            .map_err(|e| csv_error(path, e))?
            .iter()
            .map(|h| h.trim().to_string())
            .collect();
        let (columns, warnings) = Columns::read(path, &headers)?;
        sink.header(&warnings, rows);

        let mut tasks: Vec<TraceTask> = Vec::with_capacity(rows);
        // (hash of the id, index into `tasks`) of each row, for the
        // duplicate check (`first_duplicate`), which runs once all rows are
        // read, or at the first bad row.
        let mut ids: Vec<(u64, u32)> = Vec::with_capacity(rows);
        let on_host = OnHost::new(&host.devices);
        let hasher = DefaultHashBuilder::default();
        let mut record = csv::ByteRecord::new();
        loop {
            match csv.read_byte_record(&mut record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    return Err(first_duplicate(path, &tasks, &mut ids, None)
                        .unwrap_or_else(|| csv_error(path, e)))
                }
            }
            let row = Row {
                path,
                record: &record,
                line: record.position().map_or(0, |p| p.line()),
            };
            if let Some(i) = (0..record.len()).find(|&i| std::str::from_utf8(&record[i]).is_err()) {
                let col = headers.get(i).map_or("?", String::as_str);
                return Err(first_duplicate(path, &tasks, &mut ids, None)
                    .unwrap_or_else(|| row.err(col, "expected UTF-8 text".into())));
            }
            let id = row.field(columns.id);
            if id.is_empty() {
                return Err(first_duplicate(path, &tasks, &mut ids, None)
                    .unwrap_or_else(|| row.err("id", "expected a non-empty id".into())));
            }
            let hash = hasher.hash_one(id);
            // The rest of the row; a duplicate id (of this row or an
            // earlier one) is reported before anything wrong with it.
            match row.task(id, &columns, host, apps, &on_host) {
                Ok(task) => {
                    sink.row(&task);
                    ids.push((hash, tasks.len() as u32));
                    tasks.push(task);
                }
                Err(e) => {
                    return Err(
                        first_duplicate(path, &tasks, &mut ids, Some((id, hash, row.line)))
                            .unwrap_or(e),
                    )
                }
            }
        }
        match first_duplicate(path, &tasks, &mut ids, None) {
            Some(e) => Err(e),
            None => Ok(Trace { tasks, warnings }),
        }
    }
}

/// A CSV reader's error, naming its line.
fn csv_error(path: &Path, e: csv::Error) -> InputError {
    let line = e.position().map(|p| p.line());
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => {
            format!("expected {expected_len} fields like the header, got {len}")
        }
        _ => e.to_string(),
    };
    InputError::at(path, line, None, message)
}

/// Where each column is in a trace's header.
struct Columns {
    id: usize,
    arrival: usize,
    workload: usize,
    mem_gb: usize,
    deadline: usize,
    weight: usize,
    gpus: Option<usize>,
    gpus_alt: Option<usize>,
    runtimes: Option<usize>,
    app: Option<usize>,
    command: Option<usize>,
    actual: Option<usize>,
}

impl Columns {
    /// The columns of `headers`, and a warning for each unknown one; a
    /// missing required column is an error on line 1.
    fn read(path: &Path, headers: &[String]) -> Result<(Columns, Vec<String>), InputError> {
        let column = |name: &str| headers.iter().position(|h| h == name);
        let mut warnings = Vec::new();
        for h in headers
            .iter()
            .filter(|h| !REQUIRED.contains(&h.as_str()) && !OPTIONAL.contains(&h.as_str()))
        {
            warnings.push(format!("{}: ignoring unknown column {h:?}", path.display()));
        }
        let mut required = [0usize; REQUIRED.len()];
        for (slot, name) in required.iter_mut().zip(REQUIRED) {
            *slot = column(name).ok_or_else(|| {
                InputError::at(
                    path,
                    Some(1),
                    None,
                    format!("missing required column {name:?}"),
                )
            })?;
        }
        let [id, arrival, workload, mem_gb, deadline, weight] = required;
        let columns = Columns {
            id,
            arrival,
            workload,
            mem_gb,
            deadline,
            weight,
            gpus: column("gpus"),
            gpus_alt: column("gpus_alt"),
            runtimes: column("runtimes"),
            app: column("app"),
            command: column("command"),
            actual: column("actual"),
        };
        Ok((columns, warnings))
    }
}

/// One record of a trace, every field of it checked as UTF-8.
struct Row<'a> {
    path: &'a Path,
    record: &'a csv::ByteRecord,
    line: u64,
}

impl<'a> Row<'a> {
    /// The error of column `col` on this row.
    fn err(&self, col: &str, msg: String) -> InputError {
        InputError::at(
            self.path,
            Some(self.line),
            Some(format!("column {col}")),
            msg,
        )
    }

    /// Field `i`, trimmed (`""` past the record's end).
    fn field(&self, i: usize) -> &'a str {
        self.record.get(i).map_or("", |bytes| {
            // SAFETY: every field of the record was checked as UTF-8
            // before it is read, and trimming ASCII whitespace off UTF-8
            // leaves UTF-8.
            unsafe { std::str::from_utf8_unchecked(bytes.trim_ascii()) }
        })
    }

    /// The field of an optional column, when the column is there and the
    /// field not empty.
    fn optional(&self, col: Option<usize>) -> Option<&'a str> {
        col.map(|i| self.field(i)).filter(|s| !s.is_empty())
    }

    /// The number in field `i` (column `name`), within `rule`.
    fn number(&self, i: usize, name: &str, rule: Rule) -> Result<f64, InputError> {
        let text = self.field(i);
        match text.parse::<f64>() {
            Ok(x) if rule.accepts(x) => Ok(x),
            Ok(x) if x.is_finite() && x.abs() > MAX_VALUE => {
                Err(self.err(name, rule.check(x).unwrap_err()))
            }
            _ => Err(self.err(name, format!("expected {}, got {text:?}", rule.describe()))),
        }
    }

    /// The task of this row, whose id is `id`, checked against `host` and
    /// `apps`.
    fn task(
        &self,
        id: &str,
        columns: &Columns,
        host: &Host,
        apps: &AppLibrary,
        on_host: &OnHost<'_>,
    ) -> Result<TraceTask, InputError> {
        let id = id.to_string();
        let gpus = self.gpus(columns.gpus)?;
        let alt_gpus = self.alt_gpus(columns.gpus_alt)?;
        let runtimes = self.runtimes(columns.runtimes)?;
        let app_name = self.optional(columns.app).unwrap_or(DEFAULT_APP);
        let app = apps.get(app_name).ok_or_else(|| {
            self.err(
                "app",
                format!(
                    "unknown application profile {app_name:?}; known: {}",
                    apps.names().join(", ")
                ),
            )
        })?;
        let spec = TaskSpec {
            id,
            arrival: self.number(columns.arrival, "arrival", Rule::ARRIVAL)?,
            workload: self.number(columns.workload, "workload", Rule::WORKLOAD)?,
            mem_gb: self.number(columns.mem_gb, "mem_gb", Rule::MEM_GB)?,
            deadline: self.number(columns.deadline, "deadline", Rule::DEADLINE)?,
            weight: self.number(columns.weight, "weight", Rule::WEIGHT)?,
            gpus,
            alt_gpus,
            runtimes,
            app: app.clone(),
        };
        spec.check_on(on_host)
            .map_err(|(column, problem)| self.err(column, problem))?;
        let command = self.optional(columns.command).map(str::to_owned);
        let actual = self.actual(columns.actual, &spec, host)?;
        Ok(TraceTask {
            line: self.line,
            spec,
            command,
            actual,
        })
    }

    /// `gpus`: 1 when absent.
    fn gpus(&self, col: Option<usize>) -> Result<u32, InputError> {
        match self.optional(col) {
            None => Ok(1),
            Some(text) => match text.parse::<u32>() {
                Ok(g) if g >= 1 => Ok(g),
                _ => Err(self.err("gpus", format!("expected an integer >= 1, got {text:?}"))),
            },
        }
    }

    /// `gpus_alt`: none when absent.
    fn alt_gpus(&self, col: Option<usize>) -> Result<Vec<u32>, InputError> {
        match self.optional(col) {
            None => Ok(Vec::new()),
            Some(text) => text
                .split(';')
                .map(|v| v.trim().parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| {
                    self.err(
                        "gpus_alt",
                        format!("expected ';'-separated integers >= 1, got {text:?}"),
                    )
                }),
        }
    }

    /// `runtimes`: none when absent.
    fn runtimes(&self, col: Option<usize>) -> Result<Vec<f64>, InputError> {
        match self.optional(col) {
            None => Ok(Vec::new()),
            Some(text) => text
                .split(';')
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|&x| Rule::RUNTIME.accepts(x))
                })
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    self.err(
                        "runtimes",
                        format!("expected ';'-separated numbers > 0 or inf, got {text:?}"),
                    )
                }),
        }
    }

    /// `actual`, whose true run times (`spec`'s scaled to it) stay within
    /// the cap on `host` too.
    fn actual(
        &self,
        col: Option<usize>,
        spec: &TaskSpec,
        host: &Host,
    ) -> Result<Option<f64>, InputError> {
        let actual = match self.optional(col) {
            None => return Ok(None),
            Some(text) => match text.parse::<f64>().map(|x| Rule::WORKLOAD.check(x)) {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => return Err(self.err("actual", e)),
                Err(_) => {
                    return Err(self.err(
                        "actual",
                        format!("expected {}, got {text:?}", Rule::WORKLOAD.describe()),
                    ))
                }
            },
        };
        let true_spec = TaskSpec {
            workload: actual,
            runtimes: spec
                .runtimes
                .iter()
                .map(|r| r * actual / spec.workload)
                .collect(),
            ..spec.clone()
        };
        match true_spec.runtime_problem(&host.devices) {
            Some(problem) => Err(self.err("actual", problem)),
            None => Ok(Some(actual)),
        }
    }
}

/// What hears of a trace as it is read ([`Trace::load_into`]).
pub(crate) trait RowSink {
    /// The header is read: the trace's `warnings`, and about how many rows
    /// follow (at most; 0 when unknown).
    fn header(&mut self, warnings: &[String], rows: usize);
    /// `task` is read and good (a later row may still be bad, or have its id).
    fn row(&mut self, task: &TraceTask);
}

/// Nothing hears.
impl RowSink for () {
    fn header(&mut self, _: &[String], _: usize) {}
    fn row(&mut self, _: &TraceTask) {}
}

/// The error for the first row, in file order, whose id an earlier row
/// has, if any: among `tasks` (whose ids hash as `ids` says, `(hash, row)`;
/// sorted here) and `last`, the id, hash and line of a row read after them.
///
/// One sort of the hashes instead of a hash table the rows probe as they
/// come: on a large trace the table is far larger than the caches, and
/// each probe a miss.
fn first_duplicate(
    path: &Path,
    tasks: &[TraceTask],
    ids: &mut Vec<(u64, u32)>,
    last: Option<(&str, u64, u64)>,
) -> Option<InputError> {
    let rows = tasks.len() as u32;
    if let Some((_, hash, _)) = last {
        ids.push((hash, rows));
    }
    ids.sort_unstable();
    let id_of = |row: u32| match last {
        Some((id, _, _)) if row == rows => id,
        _ => tasks[row as usize].spec.id.as_str(),
    };
    let line_of = |row: u32| match last {
        Some((_, _, line)) if row == rows => line,
        _ => tasks[row as usize].line,
    };
    // (row, its first occurrence's row), the least row.
    let mut found: Option<(u32, u32)> = None;
    for same_hash in ids.chunk_by(|a, b| a.0 == b.0).filter(|c| c.len() > 1) {
        for (k, &(_, row)) in same_hash.iter().enumerate().skip(1) {
            let first = same_hash[..k]
                .iter()
                .map(|&(_, r)| r)
                .find(|&r| id_of(r) == id_of(row));
            if let Some(first) = first {
                if found.is_none_or(|(f, _)| row < f) {
                    found = Some((row, first));
                }
            }
        }
    }
    let (row, first) = found?;
    Some(InputError::at(
        path,
        Some(line_of(row)),
        Some("column id".into()),
        format!(
            "duplicate id {:?} (first on line {})",
            id_of(row),
            line_of(first)
        ),
    ))
}

/// How many lines `text` has (newlines, and a last line without one).
fn line_count(text: &[u8]) -> usize {
    let newlines = text.iter().filter(|&&b| b == b'\n').count();
    newlines + usize::from(text.last().is_some_and(|&b| b != b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        crate::input::host::parse(
            Path::new("host.toml"),
            "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n",
        )
        .unwrap()
    }

    fn parse(text: &str) -> Result<Trace, String> {
        Trace::parse(
            Path::new("trace.csv"),
            text.as_bytes(),
            &host(),
            &AppLibrary::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn reads_rows_in_order_with_optional_columns() {
        let t = parse(
            "# a comment\nid,arrival,workload,mem_gb,deadline,weight,gpus,runtimes,app,extra\n\
             a,0,10,4,20,1,,,,x\n\
             b,1.5,3,8,9,2,2,4;inf,default,y\n",
        )
        .unwrap();
        assert_eq!(
            t.warnings,
            vec!["trace.csv: ignoring unknown column \"extra\""]
        );
        let a = &t.tasks[0];
        assert_eq!(
            (
                a.line,
                a.spec.id.as_str(),
                a.spec.gpus,
                a.spec.runtimes.len()
            ),
            (3, "a", 1, 0)
        );
        let b = &t.tasks[1].spec;
        assert_eq!(
            (b.arrival, b.workload, b.mem_gb, b.deadline, b.weight, b.gpus),
            (1.5, 3.0, 8.0, 9.0, 2.0, 2)
        );
        assert_eq!(b.runtimes, vec![4.0, f64::INFINITY]);
    }

    #[test]
    fn run_times_beyond_the_cap_are_refused() {
        let slow = crate::input::host::parse(
            Path::new("host.toml"),
            "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n[[gpu]]\nmodel = \"T4\"\nspeed = 1e-6\n",
        )
        .unwrap();
        let parse = |text: &str| {
            Trace::parse(
                Path::new("trace.csv"),
                text.as_bytes(),
                &slow,
                &AppLibrary::default(),
            )
            .map(|t| t.tasks.len())
            .map_err(|e| e.to_string())
        };
        let head = "id,arrival,workload,mem_gb,deadline,weight,runtimes\n";
        assert_eq!(
            parse(&format!("{head}a,0,1e6,1,1,1,\n")),
            Err("trace.csv:2: column workload: the run time on device 1 would be 1e12 s, above the cap of 1e9 s".into())
        );
        // The same work with measured run times (inf: cannot use) is fine.
        assert_eq!(parse(&format!("{head}a,0,1e6,1,1,1,1e6;inf\n")), Ok(1));
    }

    /// Read from a file (room made from its line count), rows and errors
    /// are the same as from a reader: a last line without a newline counts,
    /// and an error names the file, the line and the column.
    #[test]
    fn a_file_reads_as_its_text_does() {
        let dir = std::env::temp_dir().join(format!("gpu-agent-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Trace::load(&path, &host(), &AppLibrary::default()).map_err(|e| e.to_string())
        };
        let text = "# c\nid,arrival,workload,mem_gb,deadline,weight\na,0,1,1,1,1\nb,2,3,4,5,6";
        assert_eq!(load(text).unwrap().tasks, parse(text).unwrap().tasks);
        assert_eq!(load(text).unwrap().tasks.len(), 2);
        assert_eq!(
            load(&format!("{text}\nc,0,1,1,1,x\n")).unwrap_err(),
            format!(
                "{}:5: column weight: expected a number > 0, got \"x\"",
                path.display()
            )
        );
        assert_eq!(
            load(&format!("{text}\nb,0,1,1,1,1\n")).unwrap_err(),
            format!(
                "{}:5: column id: duplicate id \"b\" (first on line 4)",
                path.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Duplicate ids are found once the rows are read, yet the error is
    /// still the first bad row's, in file order, a duplicate id coming
    /// before anything else wrong with its row.
    #[test]
    fn the_first_bad_row_is_named_duplicate_ids_included() {
        let head = "id,arrival,workload,mem_gb,deadline,weight\n";
        let ok = |id: &str| format!("{id},0,1,1,9,1\n");
        let cases = [
            (
                format!("{}{}{}c,0,x,1,9,1\n", ok("a"), ok("b"), ok("a")),
                "trace.csv:4: column id: duplicate id \"a\" (first on line 2)",
            ),
            (
                format!("{}{}a,0,x,1,9,1\n", ok("a"), ok("b")),
                "trace.csv:4: column id: duplicate id \"a\" (first on line 2)",
            ),
            (
                format!("{}b,0,x,1,9,1\n{}", ok("a"), ok("a")),
                "trace.csv:3: column workload: expected a number > 0, got \"x\"",
            ),
            (
                format!("{}{}{}c,0,1,1,9\n", ok("a"), ok("b"), ok("b")),
                "trace.csv:4: column id: duplicate id \"b\" (first on line 3)",
            ),
            (
                format!("{}{}{},0,1,1,9,1\n", ok("a"), ok("b"), ok("b")),
                "trace.csv:4: column id: duplicate id \"b\" (first on line 3)",
            ),
            (
                ["z", "a", "b", "b", "a", "z"].map(ok).concat(),
                "trace.csv:5: column id: duplicate id \"b\" (first on line 4)",
            ),
            (
                format!("{}a,0,1,1,9\n", ok("a")),
                "trace.csv:3: expected 6 fields like the header, got 5",
            ),
        ];
        for (rows, expected) in cases {
            assert_eq!(
                parse(&format!("{head}{rows}")).unwrap_err(),
                expected,
                "{rows}"
            );
        }
        let many: String = (0..5000).map(|i| ok(&format!("t{i}"))).collect();
        assert_eq!(parse(&format!("{head}{many}")).unwrap().tasks.len(), 5000);
        assert_eq!(
            parse(&format!("{head}{many}{}", ok("t4321"))).unwrap_err(),
            "trace.csv:5002: column id: duplicate id \"t4321\" (first on line 4323)"
        );
    }

    #[test]
    fn bad_rows_are_named() {
        let head = "id,arrival,workload,mem_gb,deadline,weight\n";
        let cases = [
            (
                "a,0,1,1,1,1\nb,0,abc,1,1,1\n",
                "trace.csv:3: column workload: expected a number > 0, got \"abc\"",
            ),
            (
                "a,-1,1,1,1,1\n",
                "trace.csv:2: column arrival: expected a number >= 0, got \"-1\"",
            ),
            (
                "a,0,1,1,NaN,1\n",
                "trace.csv:2: column deadline: expected a finite number, got \"NaN\"",
            ),
            (
                "a,0,1,1,1,inf\n",
                "trace.csv:2: column weight: expected a number > 0, got \"inf\"",
            ),
            (
                "a,1e308,1,1,1,1\n",
                "trace.csv:2: column arrival: expected at most 1e9 in magnitude (the cap on task values), got 1e308",
            ),
            (
                "a,0,1e308,1,1,1\n",
                "trace.csv:2: column workload: expected at most 1e9 in magnitude (the cap on task values), got 1e308",
            ),
            (
                "a,0,1e9,1,1,1\nb,0,1,1,1,1e10\n",
                "trace.csv:3: column weight: expected at most 1e9 in magnitude (the cap on task values), got 1e10",
            ),
            (
                "a,0,1,1,1,1\na,0,1,1,1,1\n",
                "trace.csv:3: column id: duplicate id \"a\" (first on line 2)",
            ),
            (
                "a,0,1,1,1\n",
                "trace.csv:2: expected 6 fields like the header, got 5",
            ),
        ];
        for (rows, expected) in cases {
            assert_eq!(parse(&format!("{head}{rows}")).unwrap_err(), expected);
        }
        assert_eq!(
            parse("id,arrival,workload,mem_gb,deadline\n").unwrap_err(),
            "trace.csv:1: missing required column \"weight\""
        );
        let alt = "id,arrival,workload,mem_gb,deadline,weight,gpus,gpus_alt\n";
        for (row, expected) in [
            (
                "a,0,1,1,1,1,2,1;x",
                "expected ';'-separated integers >= 1, got \"1;x\"",
            ),
            (
                "a,0,1,1,1,1,2,1;2",
                "expected distinct device counts >= 1 other than gpus (2), got 2",
            ),
            (
                "a,0,1,1,1,1,1,4;4",
                "expected distinct device counts >= 1 other than gpus (1), got 4",
            ),
            (
                "a,0,1,1,1,1,1,0",
                "expected distinct device counts >= 1 other than gpus (1), got 0",
            ),
        ] {
            assert_eq!(
                parse(&format!("{alt}{row}\n")).unwrap_err(),
                format!("trace.csv:2: column gpus_alt: {expected}")
            );
        }
        assert_eq!(
            parse(&format!("{alt}a,0,1,1,1,1,2,1;4\n")).unwrap().tasks[0]
                .spec
                .alt_gpus,
            [1, 4]
        );
        let with = "id,arrival,workload,mem_gb,deadline,weight,gpus,runtimes,app\n";
        assert_eq!(
            parse(&format!("{with}a,0,1,1,1,1,0,,\n")).unwrap_err(),
            "trace.csv:2: column gpus: expected an integer >= 1, got \"0\""
        );
        assert_eq!(
            parse(&format!("{with}a,0,1,1,1,1,1,3,\n")).unwrap_err(),
            "trace.csv:2: column runtimes: expected 2 values (one per device of the host), got 1"
        );
        assert_eq!(
            parse(&format!("{with}a,0,1,1,1,1,1,3;-2,\n")).unwrap_err(),
            "trace.csv:2: column runtimes: expected ';'-separated numbers > 0 or inf, got \"3;-2\""
        );
        assert_eq!(
            parse(&format!("{with}a,0,1,1,1,1,1,,bfs\n")).unwrap_err(),
            "trace.csv:2: column app: unknown application profile \"bfs\"; known: default"
        );
    }
}
