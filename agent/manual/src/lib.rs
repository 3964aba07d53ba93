//! Manual pages generated from the clap definitions (clap_mangen), with the
//! hand-written sections clap has no place for: FILES, SIGNALS, EXIT STATUS,
//! SEE ALSO. The packages build them with `gpu-agentd --manpage` and
//! `gpuctl manpages DIR`, so a page cannot disagree with the binary.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

/// A hand-written section, after the generated ones.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// Its heading, e.g. `FILES`.
    pub title: &'static str,
    /// A paragraph before the entries (`""`: none).
    pub intro: &'static str,
    /// Tagged paragraphs: the term (set in bold) and its text.
    pub entries: &'static [(&'static str, &'static str)],
}

/// The page of `cmd` in manual `section` ("1", "8"), followed by `extra`.
///
/// Sections: NAME, SYNOPSIS, DESCRIPTION, OPTIONS, the subcommands (each
/// refers to its own page), EXAMPLES (the command's `after_help`), then
/// `extra`.
pub fn render(mut cmd: clap::Command, section: &str, extra: &[Section]) -> io::Result<Vec<u8>> {
    cmd.build();
    let mut page = Vec::new();
    write_page(&cmd, section, extra, &mut page)?;
    Ok(page)
}

/// Writes the page of `cmd` (with `extra`) and one page per visible
/// subcommand, recursively (`gpuctl-policy-use.1`), into `dir`; returns the
/// files written.
pub fn write_pages(
    cmd: clap::Command,
    section: &str,
    extra: &[Section],
    dir: &Path,
) -> io::Result<Vec<PathBuf>> {
    // As clap_mangen::generate_to: the built command knows its subcommands'
    // full names ("gpuctl-policy-use"), and `help` is no subcommand of its own.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_tree(&cmd, section, extra, dir, &mut written)?;
    Ok(written)
}

fn write_tree(
    cmd: &clap::Command,
    section: &str,
    extra: &[Section],
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let path = dir.join(format!("{name}.{section}"));
    let mut file = io::BufWriter::new(std::fs::File::create(&path)?);
    write_page(cmd, section, extra, &mut file)?;
    file.flush()?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_tree(sub, section, &[], dir, written)?;
    }
    Ok(())
}

/// Writes the page of the built command `cmd`.
fn write_page(
    cmd: &clap::Command,
    section: &str,
    extra: &[Section],
    w: &mut dyn Write,
) -> io::Result<()> {
    let man = Man::new(cmd.clone())
        .section(section)
        .date(page_date())
        .manual("gpu-agent");
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    let mut roff = Roff::new();
    if let Some(examples) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let text = examples.to_string();
        let text = text
            .strip_prefix("Examples:\n")
            .or_else(|| text.strip_prefix("Example:\n"))
            .unwrap_or(&text);
        roff.control("SH", ["EXAMPLES"]);
        roff.control("nf", []);
        for line in text.lines() {
            roff.text([roman(line)]);
        }
        roff.control("fi", []);
    }
    for s in extra {
        roff.control("SH", [s.title]);
        if !s.intro.is_empty() {
            roff.text([roman(s.intro)]);
        }
        for (term, text) in s.entries {
            roff.control("TP", []);
            roff.text([bold(*term)]);
            roff.text([roman(*text)]);
        }
    }
    roff.to_writer(w)
}

/// The pages' date: `SOURCE_DATE_EPOCH` when set (reproducible builds),
/// else today (UTC).
fn page_date() -> String {
    let unix = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    iso_date(unix)
}

/// `YYYY-MM-DD` of a unix time (UTC), by Howard Hinnant's `civil_from_days`.
fn iso_date(unix: i64) -> String {
    let z = unix.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc_days() {
        assert_eq!(iso_date(0), "1970-01-01");
        assert_eq!(iso_date(86_399), "1970-01-01");
        assert_eq!(iso_date(951_782_400), "2000-02-29");
        assert_eq!(iso_date(1_700_000_000), "2023-11-14");
        assert_eq!(iso_date(4_107_542_400), "2100-03-01");
    }

    fn cli() -> clap::Command {
        clap::Command::new("tool")
            .version("1.2.3")
            .about("Does things")
            .arg(clap::arg!(--json "Print JSON"))
            .subcommand(
                clap::Command::new("run")
                    .about("Run it")
                    .after_help("Examples:\n  tool run\n  tool run --fast")
                    .arg(clap::arg!(--fast "Quickly")),
            )
            .subcommand(clap::Command::new("secret").hide(true))
    }

    const FILES: Section = Section {
        title: "FILES",
        intro: "What it reads.",
        entries: &[("/etc/tool.toml", "Settings.")],
    };

    #[test]
    fn a_page_holds_the_generated_and_the_extra_sections() {
        let page = String::from_utf8(render(cli(), "8", &[FILES]).unwrap()).unwrap();
        let title = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
        let date = title
            .strip_prefix(".TH tool 8 ")
            .and_then(|rest| rest.strip_suffix(" \"tool 1.2.3\" gpu-agent"))
            .unwrap_or_else(|| panic!("title line {title:?}"));
        assert_eq!(date, page_date());
        for expected in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH OPTIONS",
            "\\-\\-json",
            "tool\\-run(8)",
            ".SH FILES\nWhat it reads.\n.TP\n\\fB/etc/tool.toml\\fR\nSettings.\n",
        ] {
            assert!(
                page.contains(expected),
                "{expected:?} missing from:\n{page}"
            );
        }
        assert!(!page.contains("secret"), "{page}");
        assert!(!page.contains(".SH EXAMPLES"), "{page}");
    }

    #[test]
    fn every_visible_subcommand_gets_a_page_with_its_examples() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_pages(cli(), "1", &[FILES], dir.path()).unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["tool.1", "tool-run.1"]);
        let run = std::fs::read_to_string(dir.path().join("tool-run.1")).unwrap();
        assert!(
            run.contains(".SH EXAMPLES\n.nf\n  tool run\n  tool run \\-\\-fast\n.fi\n"),
            "{run}"
        );
        assert!(run.contains("\\-\\-fast"), "{run}");
        assert!(!run.contains(".SH FILES"), "{run}");
        let top = std::fs::read_to_string(dir.path().join("tool.1")).unwrap();
        assert!(top.contains(".SH FILES"), "{top}");
    }
}
