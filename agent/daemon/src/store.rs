//! The durable state: tasks, settings and the GPU controls the daemon changed,
//! in SQLite (WAL) under the state directory.
//!
//! Writes come in batches ([`Store::write`]), each one transaction: a batch
//! is either wholly in the database or not at all, whenever the process dies
//! (it is in the WAL file, which the kernel holds). [`Store::sync`] makes
//! every batch written so far durable against a power loss too, with one
//! `fdatasync` of the WAL file: the engine writes what a round of requests
//! changed, in one or two batches, syncs once (a group commit), then answers
//! them. [`Store::commit`] is a batch and a sync.

use std::io::Read;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use rusqlite::{params, Connection, OptionalExtension};

use gpu_agent_dbus::{TaskInfo, TaskStatus};

/// The database file inside the state directory.
pub const DB_FILE: &str = "state.db";
/// The lock file that keeps a second daemon off the same state.
pub const LOCK_FILE: &str = "lock";
/// Beside the database, the number of the highest task id it acknowledged
/// (`t<N>`), written after each sync that stored a new task: a database
/// emptied, replaced or missing its last writes is found behind it at the
/// next open (see [`Store::open`]).
pub const ACKNOWLEDGED_FILE: &str = "acknowledged";
/// How long opening waits for the lock before calling the directory taken.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Errors of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory or database cannot be opened or created.
    #[error("cannot open the state database {path}: {reason}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// SQLite refused a read or write.
    #[error("state database: {0}")]
    Sql(rusqlite::Error),
    /// The written batches cannot be made durable.
    #[error("cannot sync the state database's WAL file {path}: {cause}")]
    Sync {
        /// The WAL file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The database holds fewer tasks than were acknowledged.
    #[error(
        "the state database {path} holds tasks up to t{stored} only, but tasks up to t{acknowledged} \
         were acknowledged ({ACKNOWLEDGED_FILE} beside it): t{first_missing} to t{acknowledged} are \
         missing, the database having been emptied, replaced or cut short (its -wal file lost or \
         torn). Restore it from a backup, or start once with --accept-state-loss to go on without \
         them"
    )]
    Behind {
        /// The database file.
        path: PathBuf,
        /// The highest task number it holds (0: none).
        stored: u64,
        /// The first task number it lacks.
        first_missing: u64,
        /// The highest task number acknowledged.
        acknowledged: u64,
    },
    /// SQLite found the database damaged, or a value in it unreadable.
    #[error(
        "the state database is damaged: {0}. Restore it from a backup, or move it aside (with its \
         -wal and -shm files) and start with --accept-state-loss to begin empty"
    )]
    Damaged(rusqlite::Error),
    /// A row cannot be read back.
    #[error("state database: task {id}: {what}")]
    Corrupt {
        /// The task's id.
        id: String,
        /// What is wrong.
        what: String,
    },
}

impl From<rusqlite::Error> for StoreError {
    /// A damaged file, or a value that cannot be what was written
    /// (`invalid utf-8 sequence`), is [`StoreError::Damaged`].
    fn from(e: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        let damaged = match &e {
            rusqlite::Error::SqliteFailure(f, _) => {
                matches!(f.code, DatabaseCorrupt | NotADatabase)
            }
            rusqlite::Error::Utf8Error(..) | rusqlite::Error::FromSqlConversionFailure(..) => true,
            _ => false,
        };
        if damaged {
            StoreError::Damaged(e)
        } else {
            StoreError::Sql(e)
        }
    }
}

/// A GPU control the daemon changed and must restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRecord {
    /// GPU index (backend numbering).
    pub gpu: u32,
    /// Which control (`locked_core_clocks`, `locked_memory_clocks`, ...).
    pub control: String,
    /// What it was set to, for people.
    pub value: String,
}

/// One change to the durable state.
#[derive(Debug, Clone)]
pub enum Op {
    /// A task, new or changed, in full.
    Put(Box<TaskInfo>),
    /// A setting (`policy`, ...).
    SetMeta(String, String),
    /// A setting removed.
    ClearMeta(String),
    /// A control about to be changed.
    RecordControl(ControlRecord),
    /// A control restored.
    ClearControl {
        /// GPU index.
        gpu: u32,
        /// Which control.
        control: String,
    },
    /// A task's process group, once started.
    RecordProcess {
        /// The task's id.
        task: String,
        /// Its process group id.
        pgid: u32,
    },
    /// A task's process group has ended.
    ClearProcess {
        /// The task's id.
        task: String,
    },
    /// The requests stored up to `through` were carried out and their
    /// changes are in this batch ([`Store::put_intent`]).
    ClearIntents {
        /// The last one's sequence number.
        through: i64,
    },
}

impl Op {
    /// Stores `task` in full.
    pub fn put(task: TaskInfo) -> Op {
        Op::Put(Box::new(task))
    }
}

/// `meta` key: the highest task number given up with `--accept-state-loss`.
const GIVEN_UP_KEY: &str = "tasks_given_up_through";

/// The state store.
pub struct Store {
    conn: Connection,
    next_seq: u64,
    /// The database file; its WAL file is beside it.
    path: PathBuf,
    /// The WAL file, opened at the first sync.
    wal: Option<std::fs::File>,
    /// Whether batches were written since the last sync.
    unsynced: bool,
    /// The highest task number written, and the one [`ACKNOWLEDGED_FILE`]
    /// holds.
    written: u64,
    acknowledged: u64,
    /// [`ACKNOWLEDGED_FILE`], open.
    marker: std::fs::File,
    /// Held while the store is open.
    _lock: Flock<std::fs::File>,
}

impl Store {
    /// Opens (creating if needed) the database in `dir`; refuses one behind
    /// what was acknowledged ([`StoreError::Behind`]: it lacks the last
    /// tasks [`ACKNOWLEDGED_FILE`] says were stored) and one SQLite finds
    /// damaged ([`StoreError::Damaged`]).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(dir, false).map(|(store, _)| store)
    }

    /// [`Store::open`], going on with a database behind what was
    /// acknowledged (`--accept-state-loss`): the acknowledgement is lowered
    /// to what it holds, and the error it would have been is returned
    /// beside it.
    pub fn open_accepting_loss(dir: &Path) -> Result<(Store, Option<StoreError>), StoreError> {
        Store::open_with(dir, true)
    }

    fn open_with(dir: &Path, accept_loss: bool) -> Result<(Store, Option<StoreError>), StoreError> {
        let path = dir.join(DB_FILE);
        let fail = |reason: String| StoreError::Open {
            path: path.clone(),
            reason,
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        // A damaged file is named so; other refusals say what was tried.
        let sql = |e: rusqlite::Error| match StoreError::from(e) {
            StoreError::Sql(e) => fail(e.to_string()),
            other => other,
        };
        let lock_path = dir.join(LOCK_FILE);
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| fail(format!("cannot open {}: {e}", lock_path.display())))?;
        // A daemon killed while it was starting a task leaves the lock with
        // the child for the instant between its fork and its exec: wait a
        // little before calling the directory taken.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut file = lock_file;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => break lock,
                Err((f, nix::errno::Errno::EWOULDBLOCK))
                    if std::time::Instant::now() < deadline =>
                {
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err((_, errno)) => {
                    return Err(fail(match errno {
                        nix::errno::Errno::EWOULDBLOCK => {
                            "another gpu-agentd is using this state directory".into()
                        }
                        e => format!("cannot lock {}: {e}", lock_path.display()),
                    }))
                }
            }
        };
        let conn = Connection::open(&path).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        // A commit writes the WAL without syncing it; `sync` does, once for
        // as many commits as came before it.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sql)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS tasks (
                 seq INTEGER PRIMARY KEY,
                 id TEXT NOT NULL UNIQUE,
                 state TEXT NOT NULL,
                 owner_uid INTEGER NOT NULL,
                 devices TEXT NOT NULL,
                 submitted REAL NOT NULL,
                 started REAL,
                 finished REAL,
                 exit_code INTEGER,
                 energy_j REAL,
                 reason TEXT,
                 spec TEXT NOT NULL
             );
             CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, seq);
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS controls (
                 gpu INTEGER NOT NULL,
                 control TEXT NOT NULL,
                 value TEXT NOT NULL,
                 PRIMARY KEY (gpu, control)
             );
             CREATE TABLE IF NOT EXISTS processes (task TEXT PRIMARY KEY, pgid INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS intents (seq INTEGER PRIMARY KEY, request TEXT NOT NULL);",
        )
        .map_err(sql)?;
        // Added after the first release: a task's clocks (JSON), for stores
        // made before it.
        let has_clocks: bool = conn
            .query_row(
                "SELECT COUNT(*) > 0 FROM pragma_table_info('tasks') WHERE name = 'clocks'",
                [],
                |r| r.get(0),
            )
            .map_err(sql)?;
        if !has_clocks {
            conn.execute_batch("ALTER TABLE tasks ADD COLUMN clocks TEXT")
                .map_err(sql)?;
        }
        let max: Option<i64> = conn
            .query_row("SELECT MAX(seq) FROM tasks", [], |r| r.get(0))
            .map_err(sql)?;
        // Task numbers given up with --accept-state-loss count as stored:
        // they are never issued again.
        let given_up: u64 = conn
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                [GIVEN_UP_KEY],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(sql)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let stored = max.map_or(0, |m| m as u64).max(given_up);
        let marker_path = dir.join(ACKNOWLEDGED_FILE);
        let marker = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&marker_path)
            .map_err(|e| fail(format!("cannot open {}: {e}", marker_path.display())))?;
        let mut text = String::new();
        (&marker)
            .read_to_string(&mut text)
            .map_err(|e| fail(format!("cannot read {}: {e}", marker_path.display())))?;
        let acknowledged = match text.trim() {
            "" => 0,
            n => n.parse().unwrap_or_else(|_| {
                log::warn!(
                    "{} is unreadable ({text:?}); taking the database as it is",
                    marker_path.display()
                );
                0
            }),
        };
        let mut behind = None;
        if stored < acknowledged {
            let error = StoreError::Behind {
                path: path.clone(),
                stored,
                first_missing: stored + 1,
                acknowledged,
            };
            if !accept_loss {
                return Err(error);
            }
            behind = Some(error);
        }
        let mut store = Store {
            conn,
            next_seq: stored.max(acknowledged) + 1,
            path: path.clone(),
            wal: None,
            unsynced: false,
            written: stored,
            acknowledged,
            marker,
            _lock: lock,
        };
        if behind.is_some() {
            store.commit(&[Op::SetMeta(GIVEN_UP_KEY.into(), acknowledged.to_string())])?;
            store.written = acknowledged;
        } else if store.acknowledged != store.written {
            store
                .acknowledge()
                .map_err(|e| fail(format!("cannot write {}: {e}", marker_path.display())))?;
        }
        Ok((store, behind))
    }

    /// Writes the highest task number written to [`ACKNOWLEDGED_FILE`]: one
    /// write in place, not synced. It survives the daemon's death as the
    /// database does; a power loss may leave it behind the database (synced
    /// before it), never ahead.
    fn acknowledge(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.marker
            .write_all_at(format!("{:>20}\n", self.written).as_bytes(), 0)?;
        self.acknowledged = self.written;
        Ok(())
    }

    /// How many tasks are stored.
    pub fn count(&self) -> Result<usize, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// A fresh task id (`t<n>`); ids are never reused within a state directory.
    pub fn next_id(&mut self) -> String {
        let id = format!("t{}", self.next_seq);
        self.next_seq += 1;
        id
    }

    /// The columns [`task_of_row`] reads, in its order.
    const TASK_COLUMNS: &'static str = "seq, id, state, owner_uid, devices, submitted, started, \
         finished, exit_code, energy_j, reason, spec, clocks";

    /// The task with id `id`, if stored.
    pub fn task(&self, id: &str) -> Result<Option<TaskInfo>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tasks WHERE id = ?1",
            Self::TASK_COLUMNS
        ))?;
        let mut rows = stmt.query([id])?;
        rows.next()?
            .map(|r| task_of_row(r).map(|(_, t)| t))
            .transpose()
    }

    /// The tasks that have not ended (queued, assigned or running), in
    /// submission order.
    pub fn live_tasks(&self) -> Result<Vec<TaskInfo>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {} FROM tasks WHERE state IN ('queued', 'assigned', 'running') ORDER BY seq",
            Self::TASK_COLUMNS
        ))?;
        let mut rows = stmt.query([])?;
        let mut tasks = Vec::new();
        while let Some(r) = rows.next()? {
            tasks.push(task_of_row(r)?.1);
        }
        Ok(tasks)
    }

    /// Calls `each` with every task that has ended, in submission order, one
    /// at a time (none is kept).
    pub fn each_ended(&self, mut each: impl FnMut(TaskInfo)) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {} FROM tasks WHERE state NOT IN ('queued', 'assigned', 'running') ORDER BY seq",
            Self::TASK_COLUMNS
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            each(task_of_row(r)?.1);
        }
        Ok(())
    }

    /// Calls `each` with (owner uid, client token, id, submission time) of
    /// every ended task submitted at `since` (unix seconds) or later with a
    /// client token, in submission order: what idempotent `Submit` needs of
    /// them, without reading whole tasks.
    pub fn each_ended_token(
        &self,
        since: f64,
        mut each: impl FnMut(u32, &str, &str, f64),
    ) -> Result<(), StoreError> {
        /// The one field of a stored spec read here.
        #[derive(serde::Deserialize)]
        struct Token {
            #[serde(default)]
            client_token: String,
        }
        let mut stmt = self.conn.prepare(
            "SELECT owner_uid, id, submitted, spec FROM tasks
             WHERE state NOT IN ('queued', 'assigned', 'running') AND submitted >= ?1
             ORDER BY seq",
        )?;
        let mut rows = stmt.query([since])?;
        while let Some(r) = rows.next()? {
            let id: String = r.get(1)?;
            let spec: String = r.get(3)?;
            let token: Token = serde_json::from_str(&spec).map_err(|e| StoreError::Corrupt {
                id: id.clone(),
                what: format!("spec: {e}"),
            })?;
            if !token.client_token.is_empty() {
                each(r.get(0)?, &token.client_token, &id, r.get(2)?);
            }
        }
        Ok(())
    }

    /// Up to `limit` tasks stored as `state` (any, for `None`) with a
    /// position (their sequence number, which grows in submission order)
    /// after `after`, in submission order, each with its position; and
    /// whether more such tasks follow them.
    pub fn page(
        &self,
        after: u64,
        state: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<(u64, TaskInfo)>, bool), StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM tasks WHERE seq > ?1 AND (?2 IS NULL OR state = ?2)
             ORDER BY seq LIMIT ?3",
            Self::TASK_COLUMNS
        ))?;
        // One more than asked for tells whether any follow.
        let asked = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let mut rows = stmt.query(params![after, state, asked])?;
        let mut page = Vec::new();
        while let Some(r) = rows.next()? {
            if page.len() == limit {
                return Ok((page, true));
            }
            page.push(task_of_row(r)?);
        }
        Ok((page, false))
    }

    /// The tasks stored as rejected: (id, reason), in submission order.
    pub fn rejections(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, COALESCE(reason, '') FROM tasks WHERE state = 'rejected' ORDER BY seq",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A setting, if set.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()?)
    }

    /// The process groups of tasks recorded as started and not yet ended:
    /// (task id, process group id).
    pub fn processes(&self) -> Result<Vec<(String, u32)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT task, pgid FROM processes ORDER BY task")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stores a request that changes state before it is carried out (its
    /// own transaction; durable once [`Store::sync`] returns): its sequence
    /// number, greater than every stored one's.
    pub fn put_intent(&mut self, request: &str) -> Result<i64, StoreError> {
        self.conn
            .execute("INSERT INTO intents (request) VALUES (?1)", [request])?;
        self.unsynced = true;
        Ok(self.conn.last_insert_rowid())
    }

    /// The stored requests whose changes were never written
    /// ([`Op::ClearIntents`]): (sequence number, request), in order.
    pub fn intents(&self) -> Result<Vec<(i64, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, request FROM intents ORDER BY seq")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The controls changed and not yet restored.
    pub fn controls(&self) -> Result<Vec<ControlRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT gpu, control, value FROM controls ORDER BY gpu, control")?;
        let rows = stmt.query_map([], |r| {
            Ok(ControlRecord {
                gpu: r.get(0)?,
                control: r.get(1)?,
                value: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Applies `ops` in one transaction and syncs: all of them are durable,
    /// or none.
    pub fn commit(&mut self, ops: &[Op]) -> Result<(), StoreError> {
        self.write(ops)?;
        self.sync()
    }

    /// Makes every batch written so far durable: one `fdatasync` of the WAL
    /// file (nothing when nothing was written since the last sync).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if !self.unsynced {
            return Ok(());
        }
        let mut wal_path = self.path.clone().into_os_string();
        wal_path.push("-wal");
        let fail = |cause| StoreError::Sync {
            path: PathBuf::from(&wal_path),
            cause,
        };
        if self.wal.is_none() {
            // SQLite keeps the WAL file while its connection is open (and
            // rewrites it from the start after a checkpoint), so this handle
            // stays good. Its directory entry is made durable once.
            let wal = std::fs::File::open(&wal_path).map_err(fail)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(fail)?;
            }
            self.wal = Some(wal);
        }
        if let Some(wal) = &self.wal {
            wal.sync_data().map_err(fail)?;
        }
        self.unsynced = false;
        if self.written > self.acknowledged {
            if let Err(e) = self.acknowledge() {
                // The database has the tasks; only the check of the next
                // start is weaker.
                log::warn!(
                    "cannot write {ACKNOWLEDGED_FILE} beside {}: {e}",
                    self.path.display()
                );
            }
        }
        Ok(())
    }

    /// Applies `ops` in one transaction: all of them are in the database, or
    /// none. They survive the process's death at once, and a power loss once
    /// [`Store::sync`] has returned.
    pub fn write(&mut self, ops: &[Op]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        let mut highest = 0;
        {
            // A changed task is updated without its spec, which never
            // changes (nor is serialised again); a new one is inserted.
            let mut update = tx.prepare_cached(
                "UPDATE tasks SET state = ?2, devices = ?3, started = ?4, finished = ?5,
                     exit_code = ?6, energy_j = ?7, reason = ?8, clocks = ?9
                 WHERE id = ?1",
            )?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO tasks (seq, id, state, owner_uid, devices, submitted, started,
                                    finished, exit_code, energy_j, reason, spec, clocks)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?;
            for op in ops {
                match op {
                    Op::Put(t) => {
                        let devices = serde_json::to_string(&t.devices).expect("numbers serialise");
                        let clocks = t.clocks.as_ref().map(|c| {
                            serde_json::to_string(c).expect("numbers and words serialise")
                        });
                        let updated = update.execute(params![
                            t.id,
                            t.state.as_str(),
                            devices,
                            t.started,
                            t.finished,
                            t.exit_code,
                            t.energy_j,
                            t.reason,
                            clocks,
                        ])?;
                        if updated > 0 {
                            continue;
                        }
                        let seq: i64 =
                            t.id.strip_prefix('t')
                                .and_then(|n| n.parse().ok())
                                .ok_or_else(|| StoreError::Corrupt {
                                    id: t.id.clone(),
                                    what: "not an id this store issued".into(),
                                })?;
                        highest = highest.max(seq);
                        insert.execute(params![
                            seq,
                            t.id,
                            t.state.as_str(),
                            t.owner_uid,
                            devices,
                            t.submitted,
                            t.started,
                            t.finished,
                            t.exit_code,
                            t.energy_j,
                            t.reason,
                            serde_json::to_string(&t.spec).expect("a spec serialises"),
                            clocks,
                        ])?;
                    }
                    Op::SetMeta(key, value) => {
                        tx.execute(
                            "INSERT INTO meta (key, value) VALUES (?1, ?2)
                             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            params![key, value],
                        )?;
                    }
                    Op::ClearMeta(key) => {
                        tx.execute("DELETE FROM meta WHERE key = ?1", params![key])?;
                    }
                    Op::RecordControl(c) => {
                        tx.execute(
                            "INSERT INTO controls (gpu, control, value) VALUES (?1, ?2, ?3)
                             ON CONFLICT(gpu, control) DO UPDATE SET value = excluded.value",
                            params![c.gpu, c.control, c.value],
                        )?;
                    }
                    Op::ClearControl { gpu, control } => {
                        tx.execute(
                            "DELETE FROM controls WHERE gpu = ?1 AND control = ?2",
                            params![gpu, control],
                        )?;
                    }
                    Op::RecordProcess { task, pgid } => {
                        tx.execute(
                            "INSERT OR REPLACE INTO processes (task, pgid) VALUES (?1, ?2)",
                            params![task, pgid],
                        )?;
                    }
                    Op::ClearProcess { task } => {
                        tx.execute("DELETE FROM processes WHERE task = ?1", [task])?;
                    }
                    Op::ClearIntents { through } => {
                        tx.execute("DELETE FROM intents WHERE seq <= ?1", [through])?;
                    }
                }
            }
        }
        tx.commit()?;
        self.unsynced = true;
        self.written = self.written.max(highest as u64);
        Ok(())
    }
}

/// A task from a row of [`Store::TASK_COLUMNS`], with its sequence number.
fn task_of_row(r: &rusqlite::Row<'_>) -> Result<(u64, TaskInfo), StoreError> {
    let seq: i64 = r.get(0)?;
    let id: String = r.get(1)?;
    let corrupt = |what: String| StoreError::Corrupt {
        id: id.clone(),
        what,
    };
    let state = TaskStatus::parse(&r.get::<_, String>(2)?).map_err(corrupt)?;
    let devices = serde_json::from_str(&r.get::<_, String>(4)?)
        .map_err(|e| corrupt(format!("devices: {e}")))?;
    let spec = serde_json::from_str(&r.get::<_, String>(11)?)
        .map_err(|e| corrupt(format!("spec: {e}")))?;
    let clocks = r
        .get::<_, Option<String>>(12)?
        .map(|c| serde_json::from_str(&c))
        .transpose()
        .map_err(|e| corrupt(format!("clocks: {e}")))?;
    let task = TaskInfo {
        state,
        owner_uid: r.get(3)?,
        devices,
        submitted: r.get(5)?,
        started: r.get(6)?,
        finished: r.get(7)?,
        exit_code: r.get(8)?,
        energy_j: r.get(9)?,
        reason: r.get(10)?,
        spec,
        id,
        clocks,
        waiting: None,
    };
    Ok((seq as u64, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stored task, in submission order.
    fn all(store: &Store) -> Vec<TaskInfo> {
        let (page, more) = store.page(0, None, usize::MAX).unwrap();
        assert!(!more);
        page.into_iter().map(|(_, t)| t).collect()
    }
    use gpu_agent_dbus::SubmitSpec;

    fn task(id: &str, state: TaskStatus) -> TaskInfo {
        TaskInfo {
            id: id.into(),
            state,
            owner_uid: 1000,
            devices: vec![],
            submitted: 100.0,
            started: None,
            finished: None,
            exit_code: None,
            energy_j: None,
            reason: None,
            spec: SubmitSpec::new(1.0, 2.0, 3.0, 4.0),
            clocks: None,
            waiting: None,
        }
    }

    /// A store in a new directory with tasks t1 to t3 acknowledged (synced),
    /// then closed.
    fn three_acknowledged() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        for _ in 0..3 {
            let id = store.next_id();
            store
                .commit(&[Op::put(task(&id, TaskStatus::Queued))])
                .unwrap();
        }
        dir
    }

    #[test]
    fn an_emptied_database_is_refused_naming_the_tasks_it_lacks() {
        let dir = three_acknowledged();
        let db = dir.path().join(DB_FILE);
        // A 0-byte file, its WAL gone: SQLite would open it as a new store.
        std::fs::write(&db, b"").unwrap();
        for wal in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{wal}", db.display()));
        }
        let err = Store::open(dir.path()).err().expect("refused");
        assert!(matches!(
            err,
            StoreError::Behind {
                stored: 0,
                first_missing: 1,
                acknowledged: 3,
                ..
            }
        ));
        assert!(
            err.to_string().starts_with(&format!(
                "the state database {} holds tasks up to t0 only, but tasks up to t3 were \
                 acknowledged (acknowledged beside it): t1 to t3 are missing",
                db.display()
            )),
            "{err}"
        );
        // Refused again, until the loss is accepted; then the ids lost are
        // never issued again, and later starts take the store as it is.
        assert!(Store::open(dir.path()).is_err());
        let (mut store, behind) = Store::open_accepting_loss(dir.path()).unwrap();
        assert!(behind.is_some());
        assert_eq!(store.next_id(), "t4");
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.next_id(), "t4");
    }

    #[test]
    fn a_database_missing_its_last_writes_is_refused() {
        let dir = three_acknowledged();
        // t3's row lost, as a torn WAL loses the last commits.
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute("DELETE FROM tasks WHERE id = 't3'", [])
            .unwrap();
        drop(conn);
        let err = Store::open(dir.path()).err().expect("refused");
        assert!(
            err.to_string()
                .contains("holds tasks up to t2 only, but tasks up to t3 were acknowledged"),
            "{err}"
        );
        // Pruning older tasks is no loss of what was acknowledged last.
        let dir = three_acknowledged();
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute("DELETE FROM tasks WHERE id = 't1'", [])
            .unwrap();
        drop(conn);
        Store::open(dir.path()).unwrap();
    }

    #[test]
    fn a_damaged_database_is_named_damaged() {
        let dir = three_acknowledged();
        let db = dir.path().join(DB_FILE);
        // Let SQLite move the WAL into the file, then flip its header.
        let conn = Connection::open(&db).unwrap();
        conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")
            .unwrap();
        drop(conn);
        let mut bytes = std::fs::read(&db).unwrap();
        for b in &mut bytes[..16] {
            *b ^= 0xff;
        }
        std::fs::write(&db, bytes).unwrap();
        let err = Store::open(dir.path()).err().expect("refused").to_string();
        assert!(err.starts_with("the state database is damaged: "), "{err}");
        // A value that is not what was written (here, not UTF-8) too.
        let dir = three_acknowledged();
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute(
            "UPDATE tasks SET reason = CAST(X'ff00' AS TEXT) WHERE id = 't2'",
            [],
        )
        .unwrap();
        drop(conn);
        let store = Store::open(dir.path()).unwrap();
        let err = store.live_tasks().expect_err("unreadable").to_string();
        assert!(err.starts_with("the state database is damaged: "), "{err}");
    }

    #[test]
    fn tasks_survive_reopening_in_submission_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let (a, b) = (store.next_id(), store.next_id());
        assert_eq!((a.as_str(), b.as_str()), ("t1", "t2"));
        store
            .commit(&[
                Op::put(task(&b, TaskStatus::Queued)),
                Op::put(task(&a, TaskStatus::Queued)),
                Op::SetMeta("policy".into(), "greedy-eft".into()),
            ])
            .unwrap();
        let mut done = task(&a, TaskStatus::Succeeded);
        done.devices = vec![1, 3];
        done.started = Some(101.0);
        done.finished = Some(102.5);
        done.exit_code = Some(0);
        done.energy_j = Some(12.5);
        done.clocks = Some(gpu_agent_dbus::TaskClocks {
            core_mhz: 735,
            mem_mhz: 1215,
            v: 0.56,
            fc: 0.67,
            fm: 1.0,
            t: 1.5,
            p: 180.0,
            default_t: 1.0,
            default_p: 400.0,
            class: Some("energy".into()),
            readjusted: Some(false),
        });
        store.commit(&[Op::put(done.clone())]).unwrap();
        drop(store);

        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(all(&store), vec![done, task(&b, TaskStatus::Queued)]);
        assert_eq!(store.meta("policy").unwrap().as_deref(), Some("greedy-eft"));
        assert_eq!(store.meta("other").unwrap(), None);
        assert_eq!(store.next_id(), "t3", "ids are never reused");
    }

    #[test]
    fn written_batches_are_read_back_before_and_after_their_sync() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        // Nothing written: nothing to sync, and no WAL file is needed.
        store.sync().unwrap();
        let (a, b) = (store.next_id(), store.next_id());
        store
            .write(&[Op::put(task(&a, TaskStatus::Queued))])
            .unwrap();
        store
            .write(&[Op::put(task(&b, TaskStatus::Queued))])
            .unwrap();
        assert_eq!(all(&store).len(), 2);
        store.sync().unwrap();
        store
            .write(&[Op::put(task(&a, TaskStatus::Running))])
            .unwrap();
        store.sync().unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(
            all(&store),
            vec![task(&a, TaskStatus::Running), task(&b, TaskStatus::Queued)]
        );
    }

    #[test]
    fn tasks_are_read_by_id_state_and_page() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let states = [
            TaskStatus::Succeeded,
            TaskStatus::Queued,
            TaskStatus::Rejected,
            TaskStatus::Running,
            TaskStatus::Succeeded,
            TaskStatus::Lost,
        ];
        let ops: Vec<Op> = states
            .iter()
            .map(|&state| {
                let id = store.next_id();
                Op::put(TaskInfo {
                    reason: (state == TaskStatus::Rejected).then(|| "too big".to_string()),
                    ..task(&id, state)
                })
            })
            .collect();
        store.commit(&ops).unwrap();
        assert_eq!(
            store.task("t4").unwrap().unwrap().state,
            TaskStatus::Running
        );
        assert!(store.task("t7").unwrap().is_none());
        let ids = |tasks: Vec<TaskInfo>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(store.live_tasks().unwrap()), ["t2", "t4"]);
        let mut ended = Vec::new();
        store.each_ended(|t| ended.push(t)).unwrap();
        assert_eq!(ids(ended), ["t1", "t3", "t5", "t6"]);
        assert_eq!(
            store.rejections().unwrap(),
            [("t3".to_string(), "too big".to_string())]
        );
        // Pages by position (the sequence number), with whether more follow.
        let page = |after, state, limit| {
            let (page, more) = store.page(after, state, limit).unwrap();
            let seqs: Vec<u64> = page.iter().map(|(seq, _)| *seq).collect();
            (seqs, more)
        };
        assert_eq!(page(0, None, 2), (vec![1, 2], true));
        assert_eq!(page(2, None, 4), (vec![3, 4, 5, 6], false));
        assert_eq!(page(6, None, 4), (vec![], false));
        assert_eq!(page(0, Some("succeeded"), 1), (vec![1], true));
        assert_eq!(page(1, Some("succeeded"), 1), (vec![5], false));
        assert_eq!(page(0, Some("failed"), 5), (vec![], false));
    }

    #[test]
    fn ended_tokens_are_read_from_a_submission_time_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let tasks = [
            (TaskStatus::Succeeded, "k1"),
            (TaskStatus::Succeeded, "k2"),
            (TaskStatus::Running, "k3"),
            (TaskStatus::Cancelled, ""),
            (TaskStatus::Failed, "k5"),
        ];
        let ops: Vec<Op> = tasks
            .iter()
            .zip(0..)
            .map(|(&(state, token), i)| {
                let id = store.next_id();
                let mut t = task(&id, state);
                t.submitted = 100.0 + f64::from(i);
                t.owner_uid = 1000 + i;
                t.spec.client_token = token.into();
                Op::put(t)
            })
            .collect();
        store.commit(&ops).unwrap();
        let mut seen = Vec::new();
        store
            .each_ended_token(101.0, |owner, token, id, submitted| {
                seen.push((owner, token.to_string(), id.to_string(), submitted))
            })
            .unwrap();
        // t1 is older, t3 has not ended, t4 has no token.
        assert_eq!(
            seen,
            [
                (1001, "k2".into(), "t2".into(), 101.0),
                (1004, "k5".into(), "t5".into(), 104.0)
            ]
        );
    }

    #[test]
    fn a_failed_batch_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let id = store.next_id();
        let err = store
            .commit(&[
                Op::put(task(&id, TaskStatus::Queued)),
                Op::put(task("x9", TaskStatus::Queued)),
            ])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "state database: task x9: not an id this store issued"
        );
        assert_eq!(all(&store), vec![]);
    }

    #[test]
    fn controls_are_recorded_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let rec = |gpu, control: &str| ControlRecord {
            gpu,
            control: control.into(),
            value: "1005..1005 MHz".into(),
        };
        store
            .commit(&[
                Op::RecordControl(rec(1, "locked_core_clocks")),
                Op::RecordControl(rec(0, "locked_core_clocks")),
                Op::RecordControl(rec(0, "locked_memory_clocks")),
            ])
            .unwrap();
        store
            .commit(&[Op::ClearControl {
                gpu: 0,
                control: "locked_core_clocks".into(),
            }])
            .unwrap();
        let process = |task: &str, pgid| Op::RecordProcess {
            task: task.into(),
            pgid,
        };
        store
            .commit(&[process("t1", 4242), process("t2", 4343)])
            .unwrap();
        store
            .commit(&[Op::ClearProcess { task: "t1".into() }])
            .unwrap();
        assert_eq!(store.processes().unwrap(), vec![("t2".to_string(), 4343)]);
        assert_eq!(
            store.controls().unwrap(),
            vec![rec(0, "locked_memory_clocks"), rec(1, "locked_core_clocks")]
        );
    }

    #[test]
    fn a_second_store_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(dir.path()).unwrap();
        let err = Store::open(dir.path()).err().unwrap().to_string();
        assert!(
            err.ends_with("state.db: another gpu-agentd is using this state directory"),
            "{err}"
        );
        drop(first);
        Store::open(dir.path()).unwrap();
    }

    #[test]
    fn an_unwritable_directory_is_named() {
        let err = Store::open(Path::new("/proc/no/such")).err().unwrap();
        assert!(
            err.to_string().starts_with("cannot open the state database /proc/no/such/state.db: cannot create /proc/no/such"),
            "{err}"
        );
    }
}
