//! The commands, one module each (a command's subcommands are modules
//! below it): its clap arguments, what it does, and its tests.

pub mod adopt;
pub mod cancel;
pub mod complete;
pub mod completions;
pub mod demo;
pub mod devices;
pub mod dvfs;
pub mod inspect;
pub mod logs;
pub mod manpages;
pub mod metrics;
pub mod mig;
pub mod mock;
pub mod policy;
pub mod release;
pub mod reload;
pub mod simulate;
pub mod status;
pub mod submit;
pub mod task;
pub mod tasks;
pub mod top;
pub mod trace;
pub mod watch;

use clap::Subcommand;

/// gpuctl's commands.
#[derive(Subcommand)]
pub enum Command {
    Status(status::Args),
    Devices(devices::Args),
    Top(top::Args),
    Submit(submit::Args),
    Tasks(tasks::Args),
    Task(task::Args),
    Cancel(cancel::Args),
    Logs(logs::Args),
    Adopt(adopt::Args),
    Release(release::Args),
    Watch(watch::Args),
    Policy(policy::Args),
    Reload(reload::Args),
    Metrics(metrics::Args),
    Mig(mig::Args),
    Mock(mock::Args),
    Simulate(simulate::Args),
    Inspect(inspect::Args),
    Demo(demo::Args),
    Trace(trace::Args),
    Dvfs(dvfs::Args),
    Completions(completions::Args),
    Complete(complete::Args),
    Manpages(manpages::Args),
}

impl Command {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Status(args) => status::run(args),
            Command::Devices(args) => devices::run(args),
            Command::Top(args) => top::run(args),
            Command::Submit(args) => submit::run(args),
            Command::Tasks(args) => tasks::run(args),
            Command::Task(args) => task::run(args),
            Command::Cancel(args) => cancel::run(args),
            Command::Logs(args) => logs::run(args),
            Command::Adopt(args) => adopt::run(args),
            Command::Release(args) => release::run(args),
            Command::Watch(args) => watch::run(args),
            Command::Policy(args) => policy::run(args),
            Command::Reload(args) => reload::run(args),
            Command::Metrics(args) => metrics::run(args),
            Command::Mock(args) => mock::run(args),
            Command::Mig(args) => mig::run(args),
            Command::Simulate(args) => simulate::run(args),
            Command::Inspect(args) => inspect::run(args),
            Command::Demo(args) => demo::run(args),
            Command::Trace(args) => trace::run(args),
            Command::Dvfs(args) => dvfs::run(args),
            Command::Completions(args) => completions::run(args),
            Command::Complete(args) => complete::run(args),
            Command::Manpages(args) => manpages::run(args),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The commands without `--json`, each printing no data: a script or
    /// files for a shell or a packager, a task's own output, or one
    /// sentence saying that what was asked was done.
    const WITHOUT_JSON: &[&str] = &[
        "completions",
        "complete",
        "manpages",
        "logs",
        "devices online",
        "devices offline",
        "mig cancel",
        "mock inject",
        "mock repair",
    ];

    /// Every command that runs (not only a group of subcommands), by its
    /// words after `gpuctl`, and whether it has `--json`.
    fn commands(cmd: &clap::Command, path: &str, out: &mut Vec<(String, bool)>) {
        if !cmd.is_subcommand_required_set() || !cmd.has_subcommands() {
            let json = cmd.get_arguments().any(|a| a.get_long() == Some("json"));
            out.push((path.to_string(), json));
        }
        for sub in cmd.get_subcommands() {
            let words = format!("{path} {}", sub.get_name());
            commands(sub, words.trim_start(), out);
        }
    }

    #[test]
    fn every_command_that_prints_data_has_json() {
        let mut all = Vec::new();
        commands(&crate::Cli::command(), "", &mut all);
        let lacking: Vec<&str> = all
            .iter()
            .filter(|(path, json)| !path.is_empty() && !json)
            .map(|(path, _)| path.as_str())
            .filter(|path| !WITHOUT_JSON.contains(path))
            .collect();
        assert_eq!(lacking, Vec::<&str>::new());
        for exempt in WITHOUT_JSON {
            assert!(
                all.iter().any(|(path, json)| path == exempt && !json),
                "{exempt} is not a command without --json"
            );
        }
    }
}
