//! `mig-plan`: MIG layouts planned from each application's observed demand
//! (docs/mig.md §6.4), tasks placed by greedy earliest finish time (formats.md §5)
//! on the devices there are.
//!
//! Every `period_s` while tasks are submitted, queued or running, from one
//! full `window_s` after its first call, the policy measures each
//! application's demand (the work its tasks submitted over the last
//! `window_s` seconds, per second; gangs apart), plans the MIG-capable GPUs
//! of one model (the first such GPU's) with the MIG planner (`migplan`,
//! docs/mig.md §4) for the largest multiple of the demands they can serve; if
//! that multiple is at least (1 + `min_gain`) times the one the layouts
//! there are (or were asked for) serve, it asks through
//! [`Decision::MigLayout`] for the layouts of the GPUs whose configuration
//! differs from the plan's: planned configurations a GPU
//! already has (or was asked for) keep it, the rest go to the other GPUs in
//! index order, at most one request per GPU per `min_interval_s` and at most
//! `max_changing` GPUs changing at once, and none when a task waiting then
//! would fit no device afterwards. Tasks are then placed as
//! greedy-eft places them, never on a GPU just asked to change.
//!
//! The agent drains a GPU before it changes its layout and accepts these
//! requests only when allowed (`[mig] allow_policy = true`; `gpuctl
//! simulate` allows them); `repartition = false` only places.

// abi_stable 0.11's derives put impls inside constants.
#![allow(non_local_definitions)]

pub mod demand;
pub mod layouts;
pub mod params;
pub mod planner;

use gpu_agent_catalogue::catalogue::GpuModel;
use gpu_agent_catalogue::placement::Configuration;
use gpu_agent_eft_rule::Placer;
use gpu_agent_migplan::Options;
use gpu_agent_plugin_api::{Decision, Device, Event, Param, PolicyImpl, View};

use crate::demand::Window;
use crate::layouts::Layouts;
use crate::params::Params;

/// A layout change asked for and not yet seen applied.
#[derive(Debug, Clone, PartialEq)]
struct Asked {
    /// The configuration asked for.
    target: Configuration,
    /// When, seconds.
    at: f64,
}

/// The mig-plan policy.
#[derive(Debug)]
pub struct MigPlan {
    params: Params,
    placer: Placer,
    window: Window,
    layouts: Layouts,
    /// Per followed GPU (as [`Layouts::gpus`]): the change asked for and not
    /// yet applied, and when it last asked for one.
    asked: Vec<(Option<Asked>, Option<f64>)>,
    /// When it plans next (set at the first call).
    next_plan: Option<f64>,
    /// The wake-up last asked for.
    wake: Option<f64>,
}

impl MigPlan {
    /// The policy with `params`.
    pub fn new(params: Params) -> MigPlan {
        MigPlan {
            placer: Placer::default(),
            window: Window::new(params.window_s),
            layouts: Layouts::default(),
            asked: Vec::new(),
            next_plan: None,
            wake: None,
            params,
        }
    }

    /// The layout requests a plan made at `view.now` calls for, and the
    /// devices of the GPUs they change.
    fn replan(&mut self, view: &View<'_>) -> (Vec<Decision>, Vec<u32>) {
        let now = view.now;
        let mut decisions = Vec::new();
        let mut avoid = Vec::new();
        let Some(model) = self.layouts.gpus.first().map(|g| g.model) else {
            return (decisions, avoid);
        };
        let group: Vec<usize> = (0..self.layouts.gpus.len())
            .filter(|&k| std::ptr::eq(self.layouts.gpus[k].model, model))
            .collect();
        let speed = group
            .iter()
            .map(|&k| self.layouts.gpus[k].speed)
            .sum::<f64>()
            / group.len() as f64;
        let options = Options {
            algorithm: self.params.algorithm,
            time_limit: self.params.time_limit,
            ..Options::default()
        };
        let demands = self.window.demands();
        let Some(planned) = planner::plan(model, speed, group.len() as u32, &demands, &options)
        else {
            return (decisions, avoid);
        };
        // What each GPU has, or was asked for.
        let now_has: Vec<Configuration> = group
            .iter()
            .map(|&k| match &self.asked[k].0 {
                Some(a) => a.target.clone(),
                None => self.layouts.gpus[k].configuration(view),
            })
            .collect();
        let serves = planner::served(model, speed, &demands, &now_has);
        if planned.scale < serves * (1.0 + self.params.min_gain) {
            return (decisions, avoid);
        }
        let mut free: Vec<bool> = vec![true; group.len()];
        let mut unmatched = Vec::new();
        for c in planned.configurations {
            match (0..group.len()).find(|&i| free[i] && now_has[i] == c) {
                Some(i) => free[i] = false,
                None => unmatched.push(c),
            }
        }
        let changing = self.asked.iter().filter(|a| a.0.is_some()).count();
        let room = self.params.max_changing.saturating_sub(changing);
        // (position in the group, target) of each change asked now.
        let mut changes: Vec<(usize, Configuration)> = Vec::new();
        for target in unmatched.into_iter().take(room) {
            // The first other GPU that may change now.
            // (Not one whose devices are all offline: failed, or changing at
            // someone else's request; the agent refuses a second change.)
            let Some(i) = (0..group.len()).find(|&i| {
                let asked = &self.asked[group[i]];
                free[i]
                    && self.layouts.gpus[group[i]].takes_tasks(view)
                    && asked.0.is_none()
                    && asked
                        .1
                        .is_none_or(|t| now - t >= self.params.min_interval_s)
            }) else {
                break;
            };
            free[i] = false;
            changes.push((i, target));
        }
        let mut after = now_has;
        for (i, target) in &changes {
            after[*i] = target.clone();
        }
        if strands(view, model, &group_indices(&self.layouts, &group), &after) {
            return (decisions, avoid);
        }
        for (i, target) in changes {
            let k = group[i];
            let gpu = &self.layouts.gpus[k];
            decisions.push(Decision::MigLayout {
                gpu: gpu.index,
                layout: planner::layout_text(model, &target).into(),
            });
            avoid.push(gpu.index);
            avoid.extend(&gpu.instances);
            self.asked[k] = (Some(Asked { target, at: now }), Some(now));
        }
        (decisions, avoid)
    }
}

/// The device indices of the GPUs at `group` (positions in `layouts`).
fn group_indices(layouts: &Layouts, group: &[usize]) -> Vec<u32> {
    group.iter().map(|&k| layouts.gpus[k].index).collect()
}

/// Whether some task waiting in `view` (pending or in a local queue) would
/// fit no device once the GPUs `gpus` (of `model`) are configured `after`:
/// its memory exceeds every device's, or its gang (its fewest devices) the
/// whole GPUs left. Devices of other GPUs count as they are.
fn strands(
    view: &View<'_>,
    model: &'static GpuModel,
    gpus: &[u32],
    after: &[Configuration],
) -> bool {
    let full = layouts::full_profile(model.mig.expect("a MIG-capable model"));
    let ours = |d: &Device<'_>| {
        let gpu = d.mig.into_option().map_or(d.index, |m| m.parent);
        gpus.contains(&gpu)
    };
    // Devices of other GPUs that take tasks or will again: instances of a
    // split GPU (not retired ones: those never come back, but the view does
    // not tell them apart, so this errs towards keeping a layout) and GPUs.
    let others = view.devices.iter().filter(|d| !ours(d));
    let mut memory = 0.0_f64;
    let mut whole = 0;
    for d in others {
        memory = memory.max(d.memory_gb);
        whole += usize::from(d.mig.is_none() && d.online);
    }
    for c in after {
        if c.profiles() == [full] {
            memory = memory.max(model.memory_gb);
            whole += 1;
        } else {
            for p in c.profiles() {
                memory = memory.max(p.memory_mib as f64 / 1024.0);
            }
        }
    }
    let queued = view.devices.iter().flat_map(|d| d.queue.iter());
    view.pending.iter().chain(queued).any(|&key| {
        let task = view.task(key);
        let fewest = task.gpu_counts().min().unwrap_or(1);
        task.mem_gb > memory || (fewest > 1 && (fewest as usize) > whole)
    })
}

impl PolicyImpl for MigPlan {
    fn on_event(&mut self, view: &View<'_>, _event: &Event) -> Result<Vec<Decision>, String> {
        let now = view.now;
        self.window.observe(view);
        self.layouts.observe(view);
        self.asked.resize(self.layouts.gpus.len(), (None, None));
        // Forget changes made, or ended otherwise: the GPU's devices take
        // tasks again without the layout asked for (cancelled, or failed and
        // rolled back). While the agent drains or applies, they are offline.
        for (k, gpu) in self.layouts.gpus.iter().enumerate() {
            let done = self.asked[k]
                .0
                .as_ref()
                .is_some_and(|a| a.target == gpu.configuration(view) || gpu.takes_tasks(view));
            if done {
                self.asked[k].0 = None;
            }
        }
        let mut decisions = Vec::new();
        let mut avoid = Vec::new();
        if self.params.repartition {
            let next = *self.next_plan.get_or_insert(now + self.params.window_s);
            if now >= next {
                self.next_plan = Some(now + self.params.period_s);
                if self.window.full(now) {
                    (decisions, avoid) = self.replan(view);
                }
            }
        }
        decisions.extend(self.placer.assign_pending_avoiding(view, &avoid));
        if self.params.repartition {
            let busy = view
                .devices
                .iter()
                .any(|d| d.running.is_some() || !d.queue.is_empty());
            let next = self.next_plan.expect("set above");
            if (busy || !view.pending.is_empty() || !self.window.is_empty())
                && self.wake != Some(next)
            {
                self.wake = Some(next);
                decisions.push(Decision::WakeAt { time: next });
            }
        }
        Ok(decisions)
    }
}

gpu_agent_plugin_api::export_policy! {
    name: "mig-plan",
    description: "MIG layouts planned from each application's observed demand; greedy earliest finish time between plans",
    parameters: params::PARAMETERS,
    new: |params: &[Param]| Params::parse(params).map(MigPlan::new),
}

#[cfg(test)]
pub(crate) mod testing {
    //! Views built by hand.

    use gpu_agent_plugin_api::abi_stable::std_types::{RSlice, RStr, RVec};
    use gpu_agent_plugin_api::{
        AppModel, ClockRange, Device, MigInstance, PowerModel, Task, TaskKey, TaskState,
    };

    /// A task of `app` needing `mem_gb` on `gpus` devices, pending.
    pub fn task(key: TaskKey, app: &str, workload: f64, mem_gb: f64, gpus: u32) -> Task {
        Task {
            key,
            id: format!("t{key}").into(),
            arrival: 0.0,
            workload,
            mem_gb,
            deadline: 1e9,
            weight: 1.0,
            gpus,
            alt_gpus: RVec::new(),
            runtimes: RVec::new(),
            app: AppModel {
                name: app.into(),
                ..AppModel::builtin_default()
            },
            state: TaskState::Pending,
        }
    }

    /// An idle A100-SXM4-40GB at speed 7, whole.
    pub fn a100(index: u32, online: bool) -> Device<'static> {
        Device {
            index,
            model: RStr::from_str("A100-SXM4-40GB"),
            memory_gb: 40.0,
            speed: 7.0,
            cost_per_hour: 0.0,
            online,
            running: None.into(),
            queue: RSlice::EMPTY,
            available_at: 0.0,
            clock_range: ClockRange::DEFAULT_ONLY,
            default_power: PowerModel {
                p0: 0.0,
                gamma: 0.0,
                c: 0.0,
            },
            mig: None.into(),
        }
    }

    /// MIG instance `index` of GPU `parent`: `profile` (compute slices
    /// `slices`, `mem_gb`) at `start`.
    pub fn instance(
        index: u32,
        parent: u32,
        profile: &'static str,
        start: u32,
        slices: u32,
        mem_gb: f64,
        online: bool,
    ) -> Device<'static> {
        Device {
            memory_gb: mem_gb,
            speed: f64::from(slices),
            online,
            mig: Some(MigInstance {
                parent,
                profile: RStr::from_str(profile),
                start,
                compute_slices: slices,
            })
            .into(),
            ..a100(index, false)
        }
        .with_index(index)
    }

    trait WithIndex {
        fn with_index(self, index: u32) -> Self;
    }

    impl WithIndex for Device<'static> {
        fn with_index(mut self, index: u32) -> Self {
            self.index = index;
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use gpu_agent_plugin_api::abi_stable::std_types::{ROption, RSlice};
    use gpu_agent_plugin_api::{Device, Task, TaskKey};

    use super::testing::{a100, instance, task};
    use super::*;

    fn view<'a>(
        now: f64,
        tasks: &'a [Task],
        pending: &'a [TaskKey],
        devices: &'a [Device<'a>],
    ) -> View<'a> {
        View {
            now,
            held: RSlice::from_slice(tasks),
            pending: RSlice::from_slice(pending),
            devices: RSlice::from_slice(devices),
        }
    }

    fn policy(params: &[(&str, &str)]) -> MigPlan {
        let params: Vec<Param> = params
            .iter()
            .map(|(k, v)| Param {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect();
        MigPlan::new(Params::parse(&params).unwrap())
    }

    /// One whole A100 at speed 7: after a full window of 10 s in which
    /// `small` (4 GB) submitted 11 work units and `big` (15 GB) 30, the
    /// policy asks for 4g.20gb + 1g.10gb + 1g.5gb: big (3 units/s) on the
    /// 4g (4 units/s), the largest multiple of the demands one GPU serves
    /// being 4/3 whatever small gets; small (1.1 units/s) on the two 1g (1
    /// unit/s each), the planner's least configuration at that multiple.
    /// It keeps the pending task off the GPU it drains and wakes at the
    /// next plan; before the change is applied it asks nothing more.
    #[test]
    fn a_whole_gpu_is_asked_to_split_for_two_applications() {
        let mut p = policy(&[
            ("window_s", "10"),
            ("period_s", "5"),
            ("min_interval_s", "100"),
        ]);
        let devices = [a100(0, true)];
        // The first call starts the window.
        let out = p.on_event(&view(0.0, &[], &[], &devices), &Event::Activated);
        assert_eq!(out.unwrap(), vec![]);
        let tasks = [
            task(0, "small", 10.0, 4.0, 1),
            task(1, "big", 30.0, 15.0, 1),
        ];
        let out = p
            .on_event(
                &view(1.0, &tasks, &[0, 1], &devices),
                &Event::Arrived { task: 1 },
            )
            .unwrap();
        // Not a full window yet: placed as greedy-eft does, a wake-up at 10.
        assert_eq!(
            out,
            vec![
                Decision::Assign {
                    task: 0,
                    devices: vec![0].into(),
                    position: ROption::RNone,
                    clocks: ROption::RNone,
                },
                Decision::Assign {
                    task: 1,
                    devices: vec![0].into(),
                    position: ROption::RNone,
                    clocks: ROption::RNone,
                },
                Decision::WakeAt { time: 10.0 },
            ]
        );
        let more = [
            task(0, "small", 10.0, 4.0, 1),
            task(1, "big", 30.0, 15.0, 1),
            task(2, "small", 1.0, 4.0, 1),
        ];
        let out = p
            .on_event(&view(10.0, &more, &[2], &devices), &Event::Timer)
            .unwrap();
        // The window now holds 11 units of small, 30 of big, over 10 s.
        assert_eq!(
            out,
            vec![
                Decision::MigLayout {
                    gpu: 0,
                    layout: "4g.20gb@0,1g.10gb@4,1g.5gb@6".into(),
                },
                Decision::WakeAt { time: 15.0 },
            ]
        );
        // Drained: asked again only once the change is applied and
        // min_interval_s passed.
        let drained = [a100(0, false)];
        let out = p
            .on_event(&view(15.0, &more, &[2], &drained), &Event::Timer)
            .unwrap();
        assert_eq!(out, vec![Decision::WakeAt { time: 20.0 }]);
    }

    /// The new instances of a changed GPU become its layout: tasks go to
    /// them, and a plan that matches asks for nothing.
    #[test]
    fn new_instances_are_the_layout_and_a_matching_plan_changes_nothing() {
        let mut p = policy(&[("window_s", "10"), ("period_s", "5")]);
        let whole = [a100(0, true)];
        p.on_event(&view(0.0, &[], &[], &whole), &Event::Activated)
            .unwrap();
        let split = [
            a100(0, false),
            instance(1, 0, "4g.20gb", 0, 4, 19.5, true),
            instance(2, 0, "1g.10gb", 4, 1, 9.625, true),
            instance(3, 0, "1g.5gb", 6, 1, 4.75, true),
        ];
        assert_eq!(p.layouts.gpus[0].instances, Vec::<u32>::new());
        let tasks = [
            task(0, "small", 10.0, 4.0, 1),
            task(1, "big", 30.0, 15.0, 1),
        ];
        let out = p
            .on_event(&view(10.0, &tasks, &[0, 1], &split), &Event::Timer)
            .unwrap();
        assert_eq!(p.layouts.gpus[0].instances, vec![1, 2, 3]);
        // The plan is the layout there is (see above). small: 10 / 4 =
        // 2.5 s on the 4g, 10 s on a 1g; big fits the 4g only, after small.
        assert_eq!(
            out,
            vec![
                Decision::Assign {
                    task: 0,
                    devices: vec![1].into(),
                    position: ROption::RNone,
                    clocks: ROption::RNone,
                },
                Decision::Assign {
                    task: 1,
                    devices: vec![1].into(),
                    position: ROption::RNone,
                    clocks: ROption::RNone,
                },
                Decision::WakeAt { time: 15.0 },
            ]
        );
    }

    /// A change that would leave a waiting task no device is not asked for:
    /// a 30 GB task needs the whole A100 (no instance has 30 GB), a gang of
    /// two needs both GPUs whole.
    #[test]
    fn a_change_that_strands_a_waiting_task_is_refused() {
        use gpu_agent_catalogue::catalogue;
        let model = catalogue::lookup("A100-SXM4-40GB").unwrap();
        let t = model.mig.unwrap();
        let c = |names: &[&str]| {
            Configuration::from_profiles(
                names.iter().map(|n| t.profile_named(n).unwrap()).collect(),
            )
        };
        let split = c(&["4g.20gb", "3g.20gb"]);
        let whole = c(&["7g.40gb"]);
        let devices = [a100(0, true), a100(1, true)];
        let big = [task(0, "a", 1.0, 30.0, 1)];
        let v = view(0.0, &big, &[0], &devices);
        assert!(strands(&v, model, &[0, 1], &[split.clone(), split.clone()]));
        assert!(!strands(
            &v,
            model,
            &[0, 1],
            &[whole.clone(), split.clone()]
        ));
        // GPU 1 not planned (another model's, say) and whole: it holds it.
        assert!(!strands(&v, model, &[0], std::slice::from_ref(&split)));
        let gang = [task(0, "a", 1.0, 1.0, 2)];
        let v = view(0.0, &gang, &[0], &devices);
        assert!(strands(&v, model, &[0, 1], &[whole.clone(), split]));
        assert!(!strands(&v, model, &[0, 1], &[whole.clone(), whole]));
    }

    /// With repartition = false it only places, and never wakes.
    #[test]
    fn without_repartition_it_places_like_greedy_eft() {
        let mut p = policy(&[("window_s", "1"), ("repartition", "false")]);
        let devices = [a100(0, true)];
        let tasks = [task(0, "small", 10.0, 4.0, 1)];
        for now in [0.0, 5.0] {
            let out = p
                .on_event(&view(now, &tasks, &[0], &devices), &Event::Timer)
                .unwrap();
            assert_eq!(
                out,
                vec![Decision::Assign {
                    task: 0,
                    devices: vec![0].into(),
                    position: ROption::RNone,
                    clocks: ROption::RNone,
                }]
            );
        }
    }
}
