//! Real HTTP/1.1 servers on loopback for the scrape tests, one behaviour each: a healthy
//! vLLM-like body, a status, a hang, a reset in the middle of the body, an endless or huge
//! chunked body, and a gzip bomb. Raw `TcpListener`s so each fault is exactly what it says.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a test server does with each request.
#[derive(Clone, Debug)]
pub enum Behavior {
    /// `200` with this body and a `Content-Length`.
    Body(Bytes),
    /// `200`, body gzip-compressed with `Content-Encoding: gzip`.
    GzipBody(Bytes),
    /// This status with a short body.
    Status(u16),
    /// Reads the request and never answers (keeps the socket open).
    Hang,
    /// Declares `declared` bytes, sends `sent` of them, then resets the connection.
    ResetMidBody { declared: usize, sent: usize },
    /// `200` chunked (no length), `total` bytes of repeated metric lines (`u64::MAX`: endless).
    Chunked { total: u64 },
    /// `200` chunked, `Content-Encoding: gzip`, decompressing to `mebibytes` MiB of zeros.
    GzipBomb { mebibytes: usize },
    /// Like `GzipBomb` with 64 MiB, but the connection is reset after two blocks.
    ResetMidGzip,
    /// Waits, then `200` with this body.
    Delayed(Duration, Bytes),
    /// `200` with this body, keeping the connection open for further requests.
    KeepAlive(Bytes),
    /// `200` with whatever body the test has put here (it may change between scrapes).
    Shared(Arc<Mutex<Bytes>>),
}

/// A running server: its `/metrics` URL and every request head it received.
pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<String>>>,
    pub connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a server on `127.0.0.1:0`.
pub async fn serve(behavior: Behavior) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_listener(listener, behavior)
}

/// Starts a server on a listener the test bound itself.
pub fn serve_listener(listener: TcpListener, behavior: Behavior) -> TestServer {
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            let behavior = behavior.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let _ = handle(stream, behavior, seen).await;
            });
        }
    });
    TestServer {
        addr,
        requests,
        connections,
        task,
    }
}

/// A loopback URL where nothing listens.
pub async fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/metrics")
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut byte).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&byte[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

async fn handle(
    mut stream: TcpStream,
    behavior: Behavior,
    seen: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let head = read_head(&mut stream).await?;
    seen.lock().unwrap().push(head);
    if let Behavior::KeepAlive(body) = &behavior {
        let h = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        loop {
            stream.write_all(h.as_bytes()).await?;
            stream.write_all(body).await?;
            let head = read_head(&mut stream).await?;
            if head.is_empty() {
                return Ok(());
            }
            seen.lock().unwrap().push(head);
        }
    }
    const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
    match behavior {
        Behavior::Body(body) => {
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(h.as_bytes()).await?;
            stream.write_all(&body).await?;
        }
        Behavior::GzipBody(body) => {
            let compressed = gzip(&body);
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nContent-Encoding: gzip\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                compressed.len()
            );
            stream.write_all(h.as_bytes()).await?;
            stream.write_all(&compressed).await?;
        }
        Behavior::Status(code) => {
            let body = "internal error\n";
            let h = format!(
                "HTTP/1.1 {code} Whatever\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(h.as_bytes()).await?;
        }
        Behavior::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Behavior::ResetMidBody { declared, sent } => {
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nContent-Length: {declared}\r\n\r\n"
            );
            stream.write_all(h.as_bytes()).await?;
            stream.write_all(&metric_lines(sent)).await?;
            stream.flush().await?;
            // Let the client read what was sent, then close with RST instead of FIN.
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.set_zero_linger()?;
            drop(stream);
            return Ok(());
        }
        Behavior::Chunked { total } => {
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nTransfer-Encoding: chunked\r\n\
                 Connection: close\r\n\r\n"
            );
            stream.write_all(h.as_bytes()).await?;
            let chunk = metric_lines(64 * 1024);
            let mut left = total;
            while left > 0 {
                let n = (chunk.len() as u64).min(left) as usize;
                write_chunk(&mut stream, &chunk[..n]).await?;
                left -= n as u64;
            }
            stream.write_all(b"0\r\n\r\n").await?;
        }
        Behavior::GzipBomb { mebibytes } => {
            let h = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\
                     Connection: close\r\n\r\n";
            stream.write_all(h.as_bytes()).await?;
            let bomb = GzipBomb::new();
            write_chunk(&mut stream, &GZIP_HEADER).await?;
            for _ in 0..mebibytes {
                write_chunk(&mut stream, &bomb.block).await?;
            }
            write_chunk(&mut stream, &bomb.trailer(mebibytes)).await?;
            stream.write_all(b"0\r\n\r\n").await?;
        }
        Behavior::ResetMidGzip => {
            let h =
                "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n";
            stream.write_all(h.as_bytes()).await?;
            let bomb = GzipBomb::new();
            write_chunk(&mut stream, &GZIP_HEADER).await?;
            for _ in 0..2 {
                write_chunk(&mut stream, &bomb.block).await?;
            }
            stream.flush().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.set_zero_linger()?;
            return Ok(());
        }
        Behavior::Delayed(delay, body) => {
            tokio::time::sleep(delay).await;
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(h.as_bytes()).await?;
            stream.write_all(&body).await?;
        }
        Behavior::KeepAlive(_) => unreachable!("handled above"),
        Behavior::Shared(body) => {
            let body = body.lock().unwrap().clone();
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(h.as_bytes()).await?;
            stream.write_all(&body).await?;
        }
    }
    stream.shutdown().await
}

async fn write_chunk(stream: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    stream
        .write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    stream.write_all(data).await?;
    stream.write_all(b"\r\n").await
}

/// At least `bytes` bytes of vLLM-like metric lines (cut to exactly `bytes`).
pub fn metric_lines(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 128);
    let mut i = 0u64;
    while out.len() < bytes {
        out.extend_from_slice(
            format!("vllm:num_requests_waiting{{model_name=\"m\",pod=\"p{i}\"}} {i}\n").as_bytes(),
        );
        i += 1;
    }
    out.truncate(bytes);
    out
}

/// A small healthy vLLM V1 body, distinct per `pod`.
pub fn healthy_body(pod: &str) -> Bytes {
    Bytes::from(format!(
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 3.0\n\
         # HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 7.0\n\
         # pod {pod}\n"
    ))
}

/// A body with `series` distinct gauge series.
pub fn many_series_body(series: usize) -> Bytes {
    let mut out = String::from("# TYPE vllm:lora_requests_info gauge\n");
    for i in 0..series {
        out.push_str(&format!(
            "vllm:lora_requests_info{{max_lora=\"8\",running_lora_adapters=\"a{i}\",waiting_lora_adapters=\"\"}} {i}.0\n"
        ));
    }
    Bytes::from(out)
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// gzip member header: magic, deflate, no flags, no mtime, no extra flags, unknown OS.
pub const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// A deflate block sequence that decompresses to 1 MiB of zeros and refers to nothing before
/// it (full flush), so it can be repeated: N copies after [`GZIP_HEADER`] plus
/// [`GzipBomb::trailer`] is a valid gzip stream of N MiB of zeros, about 1000x smaller.
pub struct GzipBomb {
    pub block: Vec<u8>,
    block_crc: flate2::Crc,
}

impl GzipBomb {
    pub fn new() -> Self {
        let zeros = vec![0u8; 1 << 20];
        let mut compress = flate2::Compress::new(flate2::Compression::best(), false);
        let mut block = Vec::with_capacity(64 * 1024);
        let status = compress
            .compress_vec(&zeros, &mut block, flate2::FlushCompress::Full)
            .unwrap();
        assert_eq!(status, flate2::Status::Ok);
        assert_eq!(
            compress.total_in(),
            zeros.len() as u64,
            "block buffer too small"
        );
        let mut block_crc = flate2::Crc::new();
        block_crc.update(&zeros);
        Self { block, block_crc }
    }

    /// A final empty stored block, then the CRC-32 and size of `blocks` MiB of zeros.
    pub fn trailer(&self, blocks: usize) -> Vec<u8> {
        let mut crc = flate2::Crc::new();
        for _ in 0..blocks {
            crc.combine(&self.block_crc);
        }
        // BFINAL=1, BTYPE=00 (stored), then LEN=0, NLEN=0xffff.
        let mut out = vec![0x01, 0x00, 0x00, 0xff, 0xff];
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&(((blocks as u64) << 20) as u32).to_le_bytes());
        out
    }
}

/// Peak and current resident memory of this process, in bytes (Linux `/proc/self/status`).
pub fn memory_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from /proc/self/status"));
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap();
        kib * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}
