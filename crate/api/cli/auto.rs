//! `--backend auto` natively: where a hardware GPU is granted (or with `--race`, any), the GPU is
//! checked against the CPU and both are timed on a short decode (`api/auto.rs`); the faster is
//! kept and the other freed. The verdict is remembered per adapter, model, quantization and
//! threads in the user's cache folder (`tokenometer/auto.json`), so a later run pays nothing. An
//! explicit `--backend wgpu` gets the same check at load ([`checked_gpu`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::api::auto::{self, Entrant, Verdict};
use crate::backend::{Backend, BackendKind};
use crate::cpu::Threads;
use crate::decode::Engine;
use crate::error::Result;
use crate::loading::ModelFiles;
use crate::model::Quant;

/// Load `model` on the backend `auto` decides.
pub async fn load(
    model: &Path,
    tokenizer: Option<&[u8]>,
    quant: Quant,
    threads: Threads,
    race: bool,
) -> Result<Engine> {
    let cpu = Backend::cpu().with_threads(threads);
    let on_cpu = |note: String| {
        let backend = Backend {
            auto_note: Some(note),
            ..cpu.clone()
        };
        Engine::load(ModelFiles::from_path(model)?, tokenizer, quant, &backend)
    };
    let gpu = match Backend::wgpu().await {
        Err(e) => return on_cpu(format!("auto: CPU, no GPU adapter was granted ({e})")),
        Ok(gpu) => gpu,
    };
    let key = key(&gpu, model, quant, cpu.threads.count());
    let remembered = if race { None } else { remembered(&key) };
    if let Some(verdict) = remembered {
        let backend = match verdict.choice {
            BackendKind::Cpu => &cpu,
            BackendKind::Wgpu => &gpu,
        };
        let mut engine = Engine::load(ModelFiles::from_path(model)?, tokenizer, quant, backend)?;
        engine.info.backend_note = Some(format!(
            "{} (remembered from an earlier race; --race runs it again)",
            verdict.line
        ));
        return Ok(engine);
    }
    if gpu.software && !race {
        return on_cpu(format!(
            "auto: CPU, the only GPU adapter ({}) is software (--race races it anyway)",
            gpu.adapter
        ));
    }
    let cpu_engine = Engine::load(ModelFiles::from_path(model)?, tokenizer, quant, &cpu)?;
    let gpu_engine = Engine::load(ModelFiles::from_path(model)?, tokenizer, quant, &gpu)?;
    cpu_engine.warm_up().await?;
    gpu_engine.warm_up().await?;
    let check = auto::check(&gpu_engine, &cpu_engine).await?;
    let entrant = |label: String, tps: f64| Entrant {
        label,
        decode_tps: tps,
    };
    let threads = cpu.threads.count();
    let cpu_label = format!("CPU {}", crate::error::count(threads, "thread"));
    let cpu_tps = auto::timed_decode(&cpu_engine).await?;
    let gpu_tps = if check.passed() {
        auto::timed_decode(&gpu_engine).await?
    } else {
        0.0
    };
    let verdict = Verdict::new(
        entrant(cpu_label, cpu_tps),
        entrant(format!("wgpu ({})", gpu.adapter), gpu_tps),
        Some(check),
    );
    remember(&key, &verdict);
    let mut engine = match verdict.choice {
        BackendKind::Cpu => cpu_engine,
        BackendKind::Wgpu => gpu_engine,
    };
    engine.info.backend_note = Some(match &verdict.check {
        Some(check) if !check.passed() => format!("{}; {}", verdict.line, check.sentence()),
        _ => verdict.line.clone(),
    });
    Ok(engine)
}

/// What a verdict is remembered by: the adapter, the model file (its name and size), the
/// quantization and the CPU's threads.
fn key(gpu: &Backend, model: &Path, quant: Quant, threads: usize) -> String {
    let size = std::fs::metadata(model).map_or(0, |m| m.len());
    let name = model
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    format!(
        "{} | {name} ({size} bytes) | {quant} | {threads} threads",
        gpu.adapter
    )
}

/// The user's cache folder for tokenometer: `$XDG_CACHE_HOME`, `~/Library/Caches` on macOS,
/// `%LOCALAPPDATA%` on Windows, else `~/.cache`.
fn cache_file() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = var("XDG_CACHE_HOME").or_else(|| {
        if cfg!(target_os = "windows") {
            var("LOCALAPPDATA")
        } else if cfg!(target_os = "macos") {
            var("HOME").map(|h| h.join("Library/Caches"))
        } else {
            var("HOME").map(|h| h.join(".cache"))
        }
    })?;
    Some(base.join("tokenometer").join("auto.json"))
}

fn verdicts(path: &Path) -> BTreeMap<String, Verdict> {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn remembered(key: &str) -> Option<Verdict> {
    verdicts(&cache_file()?).remove(key)
}

/// Keep `verdict` for `key`; a cache that cannot be written only means the next run races again.
fn remember(key: &str, verdict: &Verdict) {
    let Some(path) = cache_file() else { return };
    let mut all = verdicts(&path);
    all.insert(key.to_string(), verdict.clone());
    if let (Some(dir), Ok(json)) = (path.parent(), serde_json::to_vec_pretty(&all)) {
        let _ = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, json));
    }
}

/// `--backend wgpu`: the GPU checked against the CPU at load, as the page and `auto` check it
/// (`api/auto.rs`: the same model on one CPU thread, teacher-forced logits compared); the
/// conditions say what the check found, and a GPU that disagrees is named in a warning. It runs
/// as asked.
pub async fn checked_gpu(
    files: ModelFiles,
    tokenizer: Option<&[u8]>,
    quant: Quant,
    backend: &Backend,
) -> Result<Engine> {
    let (mut engine, cpu) = Engine::load_twin(files, tokenizer, quant, backend, true)?;
    let Some(cpu) = cpu else {
        return Ok(engine);
    };
    let check = auto::check(&engine, &cpu).await?;
    drop(cpu);
    let (note, warning) = auto::chosen_gpu_note(&check, &backend.adapter);
    if let Some(warning) = warning {
        eprintln!("tokenometer: warning: {warning} (--no-check skips this check)");
    }
    engine.info.backend_note = Some(note);
    Ok(engine)
}
