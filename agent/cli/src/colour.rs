//! Colour for task states on a terminal: running green, failed, lost,
//! rejected or late red. None when standard output is no terminal, or
//! under `NO_COLOR` (no-color.org).

use std::io::IsTerminal;

use crossterm::style::Stylize;
use gpu_agent_dbus::{TaskInfo, TaskStatus};

/// Whether standard output gets colour.
pub fn enabled() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// How a task's row is painted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Good,
    Bad,
}

/// A task's tone at unix time `now`: bad if it failed or is (or ended)
/// past its deadline, good while it runs in time.
pub fn of_task(t: &TaskInfo, now: f64) -> Tone {
    let late = t.spec.deadline.is_some_and(|d| {
        !matches!(t.state, TaskStatus::Cancelled | TaskStatus::Rejected)
            && t.finished.unwrap_or(now) > t.submitted + d
    });
    match t.state {
        TaskStatus::Failed | TaskStatus::Lost | TaskStatus::Rejected => Tone::Bad,
        _ if late => Tone::Bad,
        TaskStatus::Running => Tone::Good,
        _ => Tone::Plain,
    }
}

/// `table` (a rendered table with a header line) with row `i` painted as
/// `tones[i]`.
pub fn paint_rows(table: &str, tones: &[Tone]) -> String {
    let mut out = String::with_capacity(table.len());
    for (i, line) in table.lines().enumerate() {
        let tone = i.checked_sub(1).and_then(|r| tones.get(r));
        match tone {
            Some(Tone::Good) => out.push_str(&line.green().to_string()),
            Some(Tone::Bad) => out.push_str(&line.red().to_string()),
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_painted_by_tone_and_the_header_never() {
        let table = "ID  STATE\nt1  running\nt2  failed\nt3  queued\n";
        let painted = paint_rows(table, &[Tone::Good, Tone::Bad, Tone::Plain]);
        let lines: Vec<&str> = painted.lines().collect();
        assert_eq!(lines[0], "ID  STATE");
        assert_eq!(lines[1], "\x1b[38;5;10mt1  running\x1b[39m");
        assert_eq!(lines[2], "\x1b[38;5;9mt2  failed\x1b[39m");
        assert_eq!(lines[3], "t3  queued");
        assert_eq!(paint_rows(table, &[Tone::Plain; 3]), table);
    }

    fn task(state: TaskStatus, deadline: Option<f64>, finished: Option<f64>) -> TaskInfo {
        let mut spec = gpu_agent_dbus::SubmitSpec::new(1.0, 0.0, 1.0, 1.0);
        spec.deadline = deadline;
        TaskInfo {
            id: "t1".into(),
            state,
            owner_uid: 0,
            devices: vec![],
            submitted: 1000.0,
            started: None,
            finished,
            exit_code: None,
            energy_j: None,
            reason: None,
            spec,
            clocks: None,
            waiting: None,
        }
    }

    #[test]
    fn running_is_good_failed_and_late_are_bad() {
        use TaskStatus::*;
        let now = 1100.0;
        assert_eq!(of_task(&task(Running, None, None), now), Tone::Good);
        assert_eq!(of_task(&task(Running, Some(200.0), None), now), Tone::Good);
        // Past its deadline: late, running or waiting.
        assert_eq!(of_task(&task(Running, Some(50.0), None), now), Tone::Bad);
        assert_eq!(of_task(&task(Queued, Some(50.0), None), now), Tone::Bad);
        assert_eq!(of_task(&task(Queued, None, None), now), Tone::Plain);
        // Ended: late by when it finished.
        assert_eq!(
            of_task(&task(Succeeded, Some(50.0), Some(1040.0)), now),
            Tone::Plain
        );
        assert_eq!(
            of_task(&task(Succeeded, Some(50.0), Some(1060.0)), now),
            Tone::Bad
        );
        assert_eq!(
            of_task(&task(Cancelled, Some(50.0), Some(1060.0)), now),
            Tone::Plain
        );
        for bad in [Failed, Lost, Rejected] {
            assert_eq!(of_task(&task(bad, None, Some(1001.0)), now), Tone::Bad);
        }
    }
}
