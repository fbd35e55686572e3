//! `tokenometer serve` started as a user starts it, on a free loopback port, for the tests that
//! speak HTTP to it (tests/serve.rs, tests/endpoint.rs). It stops by itself (`--exit-after`) if a
//! test does not stop it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{models, stories260k};

pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl Server {
    pub fn start<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokenometer"))
            .args(["serve", "--port", "0", "--exit-after", "900"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(" on http://") => {
                    let from = line.find("http://").unwrap();
                    let url = line[from..]
                        .split('/')
                        .take(3)
                        .collect::<Vec<_>>()
                        .join("/");
                    break url;
                }
                Some(Ok(_)) => {}
                _ => {
                    let mut stderr = String::new();
                    child
                        .stderr
                        .take()
                        .unwrap()
                        .read_to_string(&mut stderr)
                        .unwrap();
                    panic!("serve did not start: {stderr}");
                }
            }
        };
        // Keep reading what it prints, so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, url }
    }

    pub fn stories() -> Server {
        Server::start(&stories_args(&[]))
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = client()
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap())
    }

    pub fn get(&self, path: &str) -> String {
        client()
            .get(format!("{}{path}", self.url))
            .send()
            .unwrap()
            .text()
            .unwrap()
    }

    /// A streamed request's `data:` payloads, `[DONE]` included.
    pub fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let response = client()
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let ctype = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(ctype.starts_with("text/event-stream"), "{ctype}");
        data_lines(&response.text().unwrap())
    }

    /// A metric's value in `/metrics` (the first line starting with `name`).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics");
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} not in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap()
}

pub fn stories_args(extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--model".to_string(),
        stories260k("stories260K.bin").display().to_string(),
        "--tokenizer".into(),
        stories260k("tok512.bin").display().to_string(),
        "--threads".into(),
        "1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub fn smollm2() -> String {
    let path = models().join("cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "{} is missing: run `make models` (python3 models/fetch.py)",
        path.display()
    );
    path.display().to_string()
}

pub fn data_lines(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}
