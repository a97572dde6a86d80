//! Figures of a process under load, for the soak and chaos runs (issue
//! 36) and the load benchmarks: resident memory, open descriptors, CPU
//! time and context switches read from `/proc`, latency
//! percentiles, and the least-squares slope of a series over time. A leak
//! is a slope: [`Soak::verdict`] fits one to what was sampled after the
//! warm-up and calls a growing trend by name.

use std::time::Duration;

/// A soak's length and sampling interval: `SOAK_SECS` seconds (what
/// `cargo xtask soak --minutes N` sets; 60 by default, at least 12), a
/// sample every twelfth of it and at least once a minute.
pub fn length_and_interval() -> (Duration, Duration) {
    let secs = std::env::var("SOAK_SECS").ok().and_then(|s| s.parse().ok());
    let length = Duration::from_secs(secs.unwrap_or(60_u64).max(12));
    (length, (length / 12).min(Duration::from_secs(60)))
}

/// Requests a second over all of a soak's clients (`SOAK_RATE`, 100 by
/// default): a steady rate, the same on a fast machine and a slow one, so
/// the figures compare across runs and machines (the clients fall behind
/// when the service cannot keep up, and the table shows it).
pub fn rate() -> u32 {
    std::env::var("SOAK_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
        .max(1)
}

/// Anonymous resident memory of process `pid` in KiB (`RssAnon`: the
/// heap, stacks, anonymous maps; not the file pages of a memory-mapped
/// database, which the kernel may drop at will), 0 when unreadable.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

/// All resident memory of process `pid` in KiB (`VmRSS`).
pub fn vm_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time (user and system) process `pid` has used so far, in seconds,
/// all its threads, those that ended included.
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU time (user and system) the calling thread has used so far, in
/// seconds.
pub fn thread_cpu_seconds() -> f64 {
    stat_cpu_seconds("/proc/thread-self/stat")
}

/// CPU time of every process whose command name is `name` (`postgres`: a
/// database server's backends and its own processes), summed; a process
/// that ends between the listing and the read is left out.
pub fn cpu_seconds_of_processes(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            parse_stat_cpu_seconds(&stat)
        })
        .sum()
}

/// Busy CPU time of the whole machine (every core, every process: user,
/// nice, system, interrupts), from the first line of /proc/stat.
pub fn machine_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let cpu = stat.lines().next().expect("/proc/stat's cpu line");
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal guest guest_nice: busy
    // is user, nice, system, irq, softirq and steal (guest time is already
    // in user).
    let busy: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    busy / 100.0
}

/// utime + stime of a `/proc` stat file. The fields after the command name
/// (which is in parentheses and may hold spaces): state is the 3rd field of
/// the line, utime the 14th and stime the 15th, in clock ticks of USER_HZ,
/// which Linux fixes at 100 on x86 and arm (the unit /proc reports in,
/// whatever the kernel's HZ). Panics when the file cannot be read: a
/// figure of 0 would pass for a measurement.
fn stat_cpu_seconds(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse_stat_cpu_seconds(&stat).unwrap_or_else(|| panic!("{path}: not a stat line: {stat}"))
}

/// utime + stime of a stat line (see `stat_cpu_seconds`).
fn parse_stat_cpu_seconds(stat: &str) -> Option<f64> {
    let end = stat.rfind(')')?;
    let fields: Vec<&str> = stat[end + 1..].split_whitespace().collect();
    let ticks = |i: usize| -> Option<f64> { fields.get(i)?.parse().ok() };
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// What the threads of one name used (see [`threads`]).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ThreadUse {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Voluntary and involuntary context switches.
    pub context_switches: u64,
    /// Bytes handed to `write`-like calls (`wchar` of `/proc/.../io`: what
    /// reached the page cache, whether or not the disk saw it yet).
    pub written_bytes: u64,
}

/// What every thread process `pid` has now used so far, by thread name
/// with its trailing digits taken off (`tokio-rt-worker`, `sqlite-writer`,
/// `sqlx-sqlite-worker-`: the threads of one pool under one name), so the
/// CPU and switches of a request path can be placed on its threads. A
/// thread that ended takes its figures with it.
pub fn threads(pid: u32) -> std::collections::BTreeMap<String, ThreadUse> {
    let mut by_name = std::collections::BTreeMap::<String, ThreadUse>::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.filter_map(Result::ok) {
        // A thread that ends between the listing and the reads is left out.
        let (Ok(status), Ok(stat)) = (
            std::fs::read_to_string(task.path().join("status")),
            std::fs::read_to_string(task.path().join("stat")),
        ) else {
            continue;
        };
        let Some(cpu_seconds) = parse_stat_cpu_seconds(&stat) else {
            continue;
        };
        let name = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .unwrap_or_default()
            .trim()
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string();
        let context_switches: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        let written_bytes = std::fs::read_to_string(task.path().join("io"))
            .ok()
            .and_then(|io| {
                io.lines()
                    .find_map(|l| l.strip_prefix("wchar:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        let used = by_name.entry(name).or_default();
        used.cpu_seconds += cpu_seconds;
        used.context_switches += context_switches;
        used.written_bytes += written_bytes;
    }
    by_name
}

/// Open file descriptors of process `pid`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The `p`th percentile (0–100) of `values`, 0 when empty.
pub fn percentile(values: &[u64], p: f64) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The least-squares slope of `y` over `x`; 0 with fewer than two distinct
/// `x`.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// One interval of a soak.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// End of the interval since the start.
    pub at: Duration,
    /// Anonymous resident memory, KiB ([`rss_kib`]).
    pub rss_kib: u64,
    pub fds: usize,
    /// The service's data on disk (database and its journal), when it has
    /// one.
    pub db_bytes: Option<u64>,
    /// Requests answered in the interval.
    pub requests: usize,
    /// Their 99th percentile latency.
    pub p99: Duration,
}

/// The samples of one service's soak.
#[derive(Debug, Clone)]
pub struct Soak {
    pub service: String,
    pub samples: Vec<Sample>,
}

/// How much growth over the measured span still counts as noise: this
/// much resident memory (KiB) ...
const RSS_NOISE_KIB: f64 = 8.0 * 1024.0;
/// ... or this share of the mean, whichever is larger; and this many
/// descriptors.
const RSS_NOISE_SHARE: f64 = 0.05;
const FDS_NOISE: f64 = 4.0;

impl Soak {
    pub fn new(service: &str) -> Soak {
        Soak {
            service: service.to_string(),
            samples: Vec::new(),
        }
    }

    pub fn header(&self) {
        println!(
            "{:<14} {:>8} {:>9} {:>6} {:>10} {:>9} {:>9}",
            "service", "at", "anon MiB", "fds", "DB MiB", "requests", "p99 ms"
        );
    }

    /// Adds a sample and prints its line.
    pub fn push(&mut self, sample: Sample) {
        println!(
            "{:<14} {:>7.0}s {:>9.1} {:>6} {:>10} {:>9} {:>9.1}",
            self.service,
            sample.at.as_secs_f64(),
            sample.rss_kib as f64 / 1024.0,
            sample.fds,
            sample
                .db_bytes
                .map(|b| format!("{:.1}", b as f64 / (1 << 20) as f64))
                .unwrap_or_else(|| "-".into()),
            sample.requests,
            sample.p99.as_secs_f64() * 1000.0
        );
        self.samples.push(sample);
    }

    /// The samples after the first third (warm-up: caches, pools, the
    /// first compilations), as (minutes, value) points.
    fn settled(&self, value: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
        let skip = self.samples.len() / 3;
        self.samples[skip..]
            .iter()
            .map(|s| (s.at.as_secs_f64() / 60.0, value(s)))
            .collect()
    }

    /// The fitted growth per minute after the warm-up: (RSS KiB, fds).
    pub fn slopes(&self) -> (f64, f64) {
        (
            slope(&self.settled(|s| s.rss_kib as f64)),
            slope(&self.settled(|s| s.fds as f64)),
        )
    }

    /// Fails on a growing trend of resident memory or descriptors after the
    /// warm-up: a fitted slope that, over the span measured, adds more than
    /// the noise allows.
    pub fn verdict(&self) -> Result<(), String> {
        let points = self.settled(|s| s.rss_kib as f64);
        if points.len() < 3 {
            return Err(format!(
                "{}: {} samples after the warm-up; a trend needs at least 3",
                self.service,
                points.len()
            ));
        }
        let span = points.last().unwrap().0 - points[0].0;
        let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
        let (rss, fds) = self.slopes();
        let allowed = RSS_NOISE_KIB.max(RSS_NOISE_SHARE * mean);
        if rss * span > allowed {
            return Err(format!(
                "{}: resident memory grows {:.2} MiB a minute after the warm-up ({:.1} MiB over {span:.1} min, more than the {:.1} MiB of noise allowed)",
                self.service,
                rss / 1024.0,
                rss * span / 1024.0,
                allowed / 1024.0
            ));
        }
        if fds * span > FDS_NOISE {
            return Err(format!(
                "{}: open descriptors grow {fds:.2} a minute after the warm-up",
                self.service
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soak(rss: impl Fn(u64) -> u64) -> Soak {
        Soak {
            service: "test".into(),
            samples: (1..=12)
                .map(|m| Sample {
                    at: Duration::from_secs(60 * m),
                    rss_kib: rss(m),
                    fds: 20,
                    db_bytes: None,
                    requests: 100,
                    p99: Duration::from_millis(3),
                })
                .collect(),
        }
    }

    #[test]
    fn a_steady_climb_is_a_leak_and_noise_is_not() {
        // 2 MiB a minute: a leak.
        let leak = soak(|m| 100_000 + m * 2048);
        let verdict = leak.verdict().unwrap_err();
        assert!(verdict.contains("grows 2.00 MiB a minute"), "{verdict}");
        // Flat with ±1 MiB of jitter: noise.
        let flat = soak(|m| 100_000 + if m % 2 == 0 { 1024 } else { 0 });
        assert_eq!(flat.verdict(), Ok(()));
        // Growth during the warm-up only: not a trend.
        let warm = soak(|m| if m <= 4 { 50_000 + m * 10_000 } else { 100_000 });
        assert_eq!(warm.verdict(), Ok(()));
    }

    #[test]
    fn slope_and_percentile() {
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]), 2.0);
        assert_eq!(slope(&[(1.0, 1.0)]), 0.0);
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 99.0), 99);
        assert_eq!(percentile(&[], 99.0), 0);
    }

    #[test]
    fn this_process_has_memory_and_descriptors() {
        let me = std::process::id();
        assert!(rss_kib(me) > 0);
        assert!(vm_rss_kib(me) >= rss_kib(me));
        assert!(open_fds(me) >= 3);
    }

    /// A thread that writes a file shows the bytes under its name, and the
    /// switches of its waiting.
    #[test]
    fn a_writing_thread_shows_its_bytes_and_switches() {
        let dir = std::env::temp_dir().join(format!("soak-fixture-{}", std::process::id()));
        let before = threads(std::process::id());
        std::thread::Builder::new()
            .name("bytes-writer".into())
            .spawn({
                let dir = dir.clone();
                move || {
                    std::fs::write(&dir, vec![7u8; 100_000]).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(300));
                }
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150));
        let during = threads(std::process::id());
        let _ = std::fs::remove_file(&dir);
        assert!(!before.contains_key("bytes-writer"));
        let writer = during.get("bytes-writer").expect("the thread is listed");
        assert!(writer.written_bytes >= 100_000, "{writer:?}");
        assert!(writer.context_switches >= 1, "{writer:?}");
    }
}
