//! A one-request HTTP server for the tests: it answers with a canned response and hands back
//! the request it got.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

/// A server answering one request with `status`, `headers` and `body`: its base URL, and
/// the request it got once it has answered (head and body as text, and the body's bytes).
pub(crate) fn answer_once(
    status: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (String, std::thread::JoinHandle<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("connection: close\r\n\r\n");
    let served = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream);
        let mut request = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
            request.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut sent = vec![0; length];
        reader.read_exact(&mut sent).unwrap();
        request.push_str(&String::from_utf8_lossy(&sent));
        let mut stream = reader.into_inner();
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body).unwrap();
        (request, sent)
    });
    (url, served)
}
