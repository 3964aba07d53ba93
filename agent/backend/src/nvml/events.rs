//! Critical-XID and GPU-lost events, from one NVML event set kept between waits.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::struct_wrappers::event::EventData;
use nvml_wrapper::{EventSet, Nvml};

use super::errors::{on_gpu, on_host, symbol};
use crate::optional;
use crate::{BackendError, DeviceEvent, DeviceEventKind, On, Result};

const WAIT: &str = "nvmlEventSetWait_v2";
const REGISTER: &str = "nvmlDeviceRegisterEvents";
/// The XID NVML reports when it does not know the error's code.
const XID_UNKNOWN: u64 = 999;

/// The event set and what the backend knows of lost GPUs.
#[derive(Default)]
pub(super) struct Events {
    /// Every GPU that supports critical-XID events, registered on the first
    /// wait and again after a GPU is lost; `None` until then.
    set: Option<Registered>,
    /// GPUs reported lost; they are not registered again.
    lost: BTreeSet<u32>,
    /// GPU-lost events found while registering, reported before waiting.
    pending: VecDeque<DeviceEvent>,
}

/// An event set and how many GPUs it watches.
struct Registered {
    set: EventSet<'static>,
    gpus: usize,
}

impl Events {
    /// Waits up to `timeout` for the next critical XID or lost GPU.
    pub(super) fn wait(
        &mut self,
        nvml: &'static Nvml,
        timeout: Duration,
    ) -> Result<Option<DeviceEvent>> {
        if self.set.is_none() {
            self.set = Some(self.register(nvml)?);
        }
        if let Some(event) = self.pending.pop_front() {
            return Ok(Some(event));
        }
        let Some(registered) = &self.set else {
            return Ok(None);
        };
        if registered.gpus == 0 {
            // Nothing to wait on: no GPU here reports XID events.
            std::thread::sleep(timeout);
            return Ok(None);
        }
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        match registered.set.wait(timeout_ms) {
            Ok(data) => event(data),
            Err(NvmlError::Timeout) => Ok(None),
            Err(NvmlError::GpuLost) => {
                // The set may hold the lost GPU: register afresh on the next wait.
                self.set = None;
                self.find_lost(nvml)?;
                self.pending
                    .pop_front()
                    .map(Some)
                    .ok_or(BackendError::GpuLost {
                        on: On(None),
                        call: WAIT,
                    })
            }
            Err(err) => Err(on_host(WAIT)(err)),
        }
    }

    /// A new event set with every GPU not known lost that supports critical-XID
    /// events; GPUs found lost meanwhile become pending events.
    fn register(&mut self, nvml: &'static Nvml) -> Result<Registered> {
        let set = nvml
            .create_event_set()
            .map_err(on_host("nvmlEventSetCreate"))?;
        let count = nvml
            .device_count()
            .map_err(on_host("nvmlDeviceGetCount_v2"))?;
        let mut gpus = 0;
        for gpu in 0..count {
            if self.lost.contains(&gpu) {
                continue;
            }
            match register_gpu(nvml, &set, gpu) {
                Ok(true) => gpus += 1,
                Ok(false) => {}
                Err(BackendError::GpuLost { .. }) => self.report_lost(gpu),
                // Dropping `set` frees it (NVML leaves it undefined after some errors).
                Err(err) => return Err(err),
            }
        }
        Ok(Registered { set, gpus })
    }

    /// Queues a GPU-lost event for each GPU not yet known lost that is.
    fn find_lost(&mut self, nvml: &'static Nvml) -> Result<()> {
        let count = nvml
            .device_count()
            .map_err(on_host("nvmlDeviceGetCount_v2"))?;
        for gpu in 0..count {
            let probe = nvml
                .device_by_index(gpu)
                .and_then(|device| device.temperature(TemperatureSensor::Gpu));
            if !self.lost.contains(&gpu) && matches!(probe, Err(NvmlError::GpuLost)) {
                self.report_lost(gpu);
            }
        }
        Ok(())
    }

    fn report_lost(&mut self, gpu: u32) {
        self.lost.insert(gpu);
        self.pending.push_back(DeviceEvent {
            gpu,
            kind: DeviceEventKind::GpuLost,
        });
    }
}

/// Registers `gpu` in `set` for critical-XID events; `false` where it does
/// not support them.
fn register_gpu(nvml: &'static Nvml, set: &EventSet<'static>, gpu: u32) -> Result<bool> {
    let device = nvml
        .device_by_index(gpu)
        .map_err(on_gpu(gpu, "nvmlDeviceGetHandleByIndex_v2"))?;
    let supported = optional(
        device
            .supported_event_types()
            .map_err(on_gpu(gpu, "nvmlDeviceGetSupportedEventTypes")),
    )?;
    if !supported.is_some_and(|types| types.contains(EventTypes::CRITICAL_XID_ERROR)) {
        return Ok(false);
    }
    // The raw call, because the wrapper's `register_events` frees the set when
    // any one GPU refuses, losing the GPUs registered before it.
    let register = symbol(gpu, REGISTER, &nvml.lib().nvmlDeviceRegisterEvents)?;
    // SAFETY: both handles come from NVML and outlive the call; neither is freed here.
    let status = unsafe {
        register(
            device.handle(),
            EventTypes::CRITICAL_XID_ERROR.bits(),
            set.handle(),
        )
    };
    match nvml_try(status) {
        Ok(()) => Ok(true),
        Err(NvmlError::NotSupported) => Ok(false),
        Err(err) => Err(on_gpu(gpu, REGISTER)(err)),
    }
}

/// The event NVML delivered, if it is one the backend reports.
fn event(data: EventData<'static>) -> Result<Option<DeviceEvent>> {
    let gpu = data.device.index().map_err(on_host("nvmlDeviceGetIndex"))?;
    Ok(data.event_data.map(|xid| DeviceEvent {
        gpu,
        kind: DeviceEventKind::Xid(match xid {
            XidError::Value(code) => code,
            XidError::Unknown => XID_UNKNOWN,
        }),
    }))
}
