//! Facts about the machine, for the report's header.

use std::fs;

/// What the report says about where it ran.
pub struct Machine {
    /// CPU model from `/proc/cpuinfo`.
    pub cpu: String,
    /// Logical CPUs online.
    pub online: usize,
    /// Logical CPUs this process may use.
    pub allowed: usize,
    /// Kernel release and build (`uname -r`, `uname -v`).
    pub kernel: String,
    /// Current clock source.
    pub clocksource: String,
    /// Whether the CPU says it runs under a hypervisor.
    pub virtualised: bool,
}

fn read(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

impl Machine {
    /// Reads `/proc` and `/sys`; anything unreadable is "unknown".
    pub fn probe() -> Machine {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let cpu = field("model name").unwrap_or_else(|| "unknown".to_owned());
        let virtualised = field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor"));
        let online = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
        let kernel = format!(
            "{} {} {}",
            read("/proc/sys/kernel/ostype").unwrap_or_else(|| "Linux".to_owned()),
            read("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".to_owned()),
            read("/proc/sys/kernel/version").unwrap_or_default()
        );
        let clocksource = read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_else(|| "unknown".to_owned());
        Machine { cpu, online, allowed: crate::pin::allowed_cpus().len(), kernel, clocksource, virtualised }
    }
}

/// Now, as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}
