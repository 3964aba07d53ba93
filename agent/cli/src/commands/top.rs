//! `gpuctl top`: the devices' live readings and the tasks not ended, one
//! frame every interval until q, as `nvidia-smi dmon` and `htop`.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};
use gpu_agent_dbus::{DeviceStatus, TaskInfo, TaskStatus};
use serde::Serialize;

use super::devices::fetch_devices;
use super::tasks::{task, tasks_table, user_name};
use crate::client::{block_on, BusArgs, Client};
use crate::clock::Clock;
use crate::colour::{self, Tone};
use crate::output::{emit, emit_json};
use crate::table::{Align, Table};
use crate::units;

/// Watch the devices and the queues live: clocks, power, utilisation,
/// memory used, temperature, health and task of each device, and every task
/// not ended (a waiting one with its reason and expected start).
///
/// Refreshes every --interval; q, Esc or Ctrl-C quits. Running tasks are
/// green, failed or late ones red (on a terminal, unless NO_COLOR is set).
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  gpuctl top\n  gpuctl top --interval 5s\n  gpuctl top --once\n  gpuctl top --json"
)]
pub struct Args {
    /// Print one frame and exit (no terminal needed).
    #[arg(long)]
    once: bool,
    /// Print one frame as a JSON object ({"time", "policy", "devices",
    /// "tasks"}, as `gpuctl devices --json` and `gpuctl tasks --json` write
    /// them) and exit.
    #[arg(long)]
    json: bool,
    /// Time between frames: seconds or a duration (0.5, 2, 10s, 1m), at
    /// least 0.1 s.
    #[arg(long, value_name = "DURATION", default_value = "2", value_parser = interval)]
    interval: f64,
    #[command(flatten)]
    bus: BusArgs,
}

/// A refresh interval: a duration of at least 0.1 s.
fn interval(text: &str) -> Result<f64, String> {
    let secs = units::parse_duration(text)?;
    if secs < 0.1 {
        return Err(format!(
            "expected an interval of at least 0.1s, got {text:?}"
        ));
    }
    Ok(secs)
}

/// What one frame shows.
#[derive(Serialize)]
struct Frame {
    /// When it was read, unix seconds.
    time: f64,
    /// The active policy.
    policy: String,
    /// Every device, by index.
    devices: Vec<DeviceStatus>,
    /// Running, assigned and queued tasks, in that order.
    tasks: Vec<TaskInfo>,
}

/// Reads one frame from the daemon.
async fn fetch(client: &Client) -> Result<Frame> {
    let policy = client.call(client.agent.policy()).await?;
    let devices = fetch_devices(client).await?;
    let mut tasks = Vec::new();
    for state in [
        TaskStatus::Running,
        TaskStatus::Assigned,
        TaskStatus::Queued,
    ] {
        for dict in client.call(client.agent.all_tasks(state.as_str())).await? {
            tasks.push(task(&dict)?);
        }
    }
    Ok(Frame {
        time: Clock::system().now,
        policy,
        devices,
        tasks,
    })
}

/// Runs `gpuctl top`.
pub fn run(args: Args) -> Result<()> {
    let colour = colour::enabled();
    block_on(async {
        let client = Client::connect(&args.bus).await?;
        if args.json {
            return emit_json(&fetch(&client).await?);
        }
        if args.once {
            let frame = fetch(&client).await?;
            return emit(&render(&frame, &Clock::system(), colour, usize::MAX));
        }
        let _screen = Screen::enter()?;
        let period = Duration::from_secs_f64(args.interval);
        loop {
            let frame = fetch(&client).await?;
            let (_, rows) = terminal::size().unwrap_or((80, 24));
            let text = render(&frame, &Clock::system(), colour, rows as usize);
            draw(&text)?;
            let next = Instant::now() + period;
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                if event::poll(left).context("cannot read the terminal")? && quit(event::read()?) {
                    return Ok(());
                }
            }
        }
    })
}

/// Whether `e` asks to quit: q, Esc or Ctrl-C.
fn quit(e: Event) -> bool {
    match e {
        Event::Key(k) if k.kind == KeyEventKind::Press => {
            matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
        }
        _ => false,
    }
}

/// The terminal in raw mode on its alternate screen, as it was again when
/// dropped (also on an error).
struct Screen;

impl Screen {
    fn enter() -> Result<Screen> {
        terminal::enable_raw_mode()
            .context("gpuctl top needs a terminal (--once prints one frame)")?;
        let screen = Screen;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// Draws `text` over the screen (raw mode: each line ends `\r\n`).
fn draw(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    queue!(
        out,
        cursor::MoveTo(0, 0),
        terminal::Clear(terminal::ClearType::All)
    )?;
    for line in text.lines() {
        write!(out, "{line}\r\n")?;
    }
    out.flush()?;
    Ok(())
}

/// One frame as text, at most `rows` lines (the tasks that do not fit are
/// counted on the last line).
fn render(frame: &Frame, clock: &Clock, colour: bool, rows: usize) -> String {
    let count = |s: TaskStatus| frame.tasks.iter().filter(|t| t.state == s).count();
    let mut text = format!(
        "gpu-agent  policy {}  {} running, {} assigned, {} queued  {}\n\n",
        frame.policy,
        count(TaskStatus::Running),
        count(TaskStatus::Assigned),
        count(TaskStatus::Queued),
        clock.short(clock.now),
    );
    text.push_str(&devices_table(&frame.devices));
    text.push('\n');
    let used = text.lines().count();
    // The header line, the tasks that fit, and a line counting the others.
    let fit = rows.saturating_sub(used + 2);
    let (shown, hidden) = if frame.tasks.len() <= fit + 1 {
        (&frame.tasks[..], 0)
    } else {
        (&frame.tasks[..fit], frame.tasks.len() - fit)
    };
    if frame.tasks.is_empty() {
        text.push_str("no task is running or waiting\n");
    } else {
        let table = tasks_table(shown, clock, user_name);
        if colour {
            let tones: Vec<Tone> = shown
                .iter()
                .map(|t| colour::of_task(t, clock.now))
                .collect();
            text.push_str(&colour::paint_rows(&table, &tones));
        } else {
            text.push_str(&table);
        }
    }
    if hidden > 0 {
        text.push_str(&format!("… and {hidden} more (gpuctl tasks)\n"));
    }
    text
}

/// The devices with their live readings, one row each.
fn devices_table(devices: &[DeviceStatus]) -> String {
    use Align::{Left, Right};
    let mut table = Table::with_header(&[
        ("GPU", Right),
        ("NAME", Left),
        ("CLOCKS", Right),
        ("POWER", Right),
        ("UTIL", Right),
        ("MEMORY", Right),
        ("TEMP", Right),
        ("HEALTH", Left),
        ("TASK", Left),
    ]);
    for d in devices {
        let clocks = if d.core_clock_mhz == 0 {
            "-".into()
        } else {
            format!("{}/{} MHz", d.core_clock_mhz, d.mem_clock_mhz)
        };
        let memory = if d.memory_used_gb.is_nan() {
            format!("- / {}", units::gigabytes(d.memory_gb))
        } else {
            format!(
                "{} / {}",
                units::gigabytes(d.memory_used_gb),
                units::gigabytes(d.memory_gb)
            )
        };
        table.row(vec![
            d.index.to_string(),
            d.name.clone(),
            clocks,
            units::power(d.power_w),
            units::percent(d.utilization),
            memory,
            if d.temperature_c.is_nan() {
                "-".into()
            } else {
                format!("{:.0} °C", d.temperature_c)
            },
            d.health.clone(),
            if d.current_task.is_empty() {
                "-".into()
            } else {
                d.current_task.clone()
            },
        ]);
    }
    table.render()
}
