//! Reading host descriptions (formats.md §2): the GPUs of one host.

use std::path::Path;

use gpu_agent_core::catalogue;
use gpu_agent_core::host::{DeviceSpec, Host};
use serde::Deserialize;
use toml::Spanned;

use super::{line_of, parse_toml, read_text, InputError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    #[serde(default)]
    gpu: Vec<RawGpu>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    model: Spanned<String>,
    count: Option<Spanned<i64>>,
    speed: Spanned<f64>,
    mem_gb: Option<Spanned<f64>>,
    cost_per_hour: Option<Spanned<f64>>,
}

/// Reads and checks a host description.
pub fn load(path: &Path) -> Result<Host, InputError> {
    parse(path, &read_text(path)?)
}

/// Parses a host description; `path` only names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<Host, InputError> {
    let raw: RawHost = parse_toml(path, text)?;
    if raw.gpu.is_empty() {
        return Err(InputError::at(
            path,
            None,
            None,
            "no [[gpu]] entries: a host needs at least one GPU",
        ));
    }
    let mut devices = Vec::new();
    for (i, gpu) in raw.gpu.iter().enumerate() {
        let err = |span: std::ops::Range<usize>, key: &str, msg: String| {
            InputError::at(
                path,
                Some(line_of(text, span.start)),
                Some(format!("gpu[{i}].{key}")),
                msg,
            )
        };
        let model = catalogue::lookup(gpu.model.get_ref()).ok_or_else(|| {
            err(
                gpu.model.span(),
                "model",
                format!(
                    "unknown GPU model {:?}; known: {}",
                    gpu.model.get_ref(),
                    catalogue::names().join(", ")
                ),
            )
        })?;
        let count = match &gpu.count {
            None => 1,
            Some(c) if (1..=4096).contains(c.get_ref()) => *c.get_ref() as usize,
            Some(c) => {
                return Err(err(
                    c.span(),
                    "count",
                    format!("expected an integer from 1 to 4096, got {}", c.get_ref()),
                ))
            }
        };
        let positive = |v: &Spanned<f64>, key: &str| {
            let x = *v.get_ref();
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(err(
                    v.span(),
                    key,
                    format!("expected a number > 0, got {x}"),
                ))
            }
        };
        let speed = positive(&gpu.speed, "speed")?;
        let memory_gb = gpu
            .mem_gb
            .as_ref()
            .map(|m| positive(m, "mem_gb"))
            .transpose()?
            .unwrap_or(model.memory_gb);
        let cost_per_hour = match &gpu.cost_per_hour {
            None => 0.0,
            Some(c) if c.get_ref().is_finite() && *c.get_ref() >= 0.0 => *c.get_ref(),
            Some(c) => {
                return Err(err(
                    c.span(),
                    "cost_per_hour",
                    format!("expected a number >= 0, got {}", c.get_ref()),
                ))
            }
        };
        for _ in 0..count {
            let index = devices.len() as u32;
            devices.push(DeviceSpec {
                index,
                model,
                memory_gb,
                speed,
                cost_per_hour,
            });
        }
    }
    Ok(Host { devices })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Host, String> {
        super::parse(Path::new("host.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn expands_counts_in_file_order() {
        let host = parse(
            "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n\n[[gpu]]\nmodel = \"A100-SXM4-80GB\"\nspeed = 2.5\nmem_gb = 70\ncost_per_hour = 3\n",
        )
        .unwrap();
        let summary: Vec<_> = host
            .devices
            .iter()
            .map(|d| (d.index, d.model.name, d.memory_gb, d.speed, d.cost_per_hour))
            .collect();
        assert_eq!(
            summary,
            vec![
                (0, "T4", 16.0, 1.0, 0.0),
                (1, "T4", 16.0, 1.0, 0.0),
                (2, "A100-SXM4-80GB", 70.0, 2.5, 3.0)
            ]
        );
    }

    #[test]
    fn errors_name_line_and_key() {
        assert_eq!(
            parse("[[gpu]]\nmodel = \"T4\"\nspeed = -1\n").unwrap_err(),
            "host.toml:3: gpu[0].speed: expected a number > 0, got -1"
        );
        let unknown =
            parse("[[gpu]]\nmodel = \"T4\"\nspeed = 1\n[[gpu]]\nmodel = \"X1\"\nspeed = 1\n")
                .unwrap_err();
        assert!(
            unknown.starts_with(
                "host.toml:5: gpu[1].model: unknown GPU model \"X1\"; known: A100-SXM4-40GB"
            ),
            "{unknown}"
        );
        let typo = parse("[[gpu]]\nmodel = \"T4\"\nsped = 1\n").unwrap_err();
        assert!(
            typo.starts_with("host.toml:3: unknown field `sped`"),
            "{typo}"
        );
        assert_eq!(
            parse("").unwrap_err(),
            "host.toml: no [[gpu]] entries: a host needs at least one GPU"
        );
        assert_eq!(
            parse("[[gpu]]\nmodel = \"T4\"\ncount = 0\nspeed = 1\n").unwrap_err(),
            "host.toml:3: gpu[0].count: expected an integer from 1 to 4096, got 0"
        );
    }
}
