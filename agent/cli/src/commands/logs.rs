//! `gpuctl logs`: a task's output, followed while it runs.

use anyhow::Result;
use gpu_agent_dbus::OUTPUT_READ_MAX;

use super::tasks::task_id;
use crate::client::{block_on, BusArgs, Client};
use crate::output::emit_bytes;

/// Print a task's output: what its command wrote to stdout and stderr.
///
/// For its owner and admins only. The output is read by the daemon (as the
/// task's owner, from the task's output file, or from the journal or the
/// daemon's log for a task submitted without one); with --error, stderr is
/// in its own file, which `gpuctl task` names.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl logs t42\n  gpuctl logs -f 42\n  gpuctl logs --tail 20 t42"
)]
pub struct Args {
    /// The task's id (the `t` may be left out).
    #[arg(value_parser = task_id)]
    id: String,
    /// Follow the output while the task runs (or waits), until it ends.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only the last N lines (then new ones, with --follow).
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<usize>,
    #[command(flatten)]
    bus: BusArgs,
}

/// Prints a task's output, following it with `--follow` until the task ends.
pub fn run(args: Args) -> Result<()> {
    /// How long to wait before asking again for output that is not there yet.
    const POLL: std::time::Duration = std::time::Duration::from_millis(500);
    block_on(async {
        let client = Client::connect(&args.bus).await?;
        let read =
            |offset| client.call(client.agent.read_output(&args.id, offset, OUTPUT_READ_MAX));
        let mut offset = 0;
        let mut ended;
        // What there is now (all of it, to find the last lines for --tail).
        let mut now = Vec::new();
        loop {
            let (data, next, end) = read(offset).await?;
            ended = end;
            offset = next;
            if data.is_empty() {
                break;
            }
            if args.tail.is_none() {
                emit_bytes(&data)?;
            } else {
                now.extend_from_slice(&data);
            }
        }
        if let Some(n) = args.tail {
            emit_bytes(last_lines(&now, n))?;
        }
        while args.follow && !ended {
            tokio::time::sleep(POLL).await;
            loop {
                let (data, next, end) = read(offset).await?;
                ended = end;
                offset = next;
                if data.is_empty() {
                    break;
                }
                emit_bytes(&data)?;
            }
        }
        Ok(())
    })
}

/// The last `n` lines of `text` (a last line without its newline counts).
fn last_lines(text: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, &b)| b == b'\n')
        .nth(n - 1)
        .map_or(0, |(i, _)| i + 1);
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_counted_from_the_end() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", 0), b"");
        assert_eq!(last_lines(b"", 3), b"");
    }
}
