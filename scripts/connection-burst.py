#!/usr/bin/env python3
"""The memory of `tollgate serve` before, during and after a burst of keep-alive connections
(docs/benchmarks.md, "Memory after a burst of connections").

usage: scripts/connection-burst.py TOLLGATE_BINARY [CONNECTIONS] [--token] [--after SECONDS]

Starts the binary as `tollgate serve` on a fresh SQLite store in a temporary folder (with `--token`, one API
token is configured, so connections are not attributed to their user on accept), opens CONNECTIONS
(default 7,500) connections that each make one `GET /healthz` and stay open, closes them all, and prints
the server's VmRSS (MiB) when idle, with every connection open, and each second after closing for
SECONDS (default 20). The open-file limit is raised to its hard limit; it must be above CONNECTIONS.
"""
import os, resource, socket, subprocess, sys, tempfile, time

args = [a for a in sys.argv[1:] if not a.startswith("--")]
binary = args[0]
connections = int(args[1]) if len(args) > 1 else 7500
after = int(sys.argv[sys.argv.index("--after") + 1]) if "--after" in sys.argv else 20
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def healthz(sock, port):
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("the server closed a connection")
        answer += chunk


folder = tempfile.mkdtemp(prefix="tollgate-burst-")
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
config = os.path.join(folder, "tollgate.toml")
with open(config, "w") as out:
    out.write(f'[store]\nurl = "sqlite://{folder}/tollgate.db"\n')
    out.write(f'[server]\naddr = "127.0.0.1:{port}"\nidle_timeout = "10m"\n')
    if "--token" in sys.argv:
        out.write('[[auth.tokens]]\nname = "root"\ntoken = "root-token"\nroles = ["admin"]\n')
server = subprocess.Popen([binary, "--config", config, "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                healthz(sock, port)
            break
        except OSError:
            time.sleep(0.05)
    time.sleep(1)
    print(f"idle: {rss(server.pid):.0f} MiB")
    started = time.time()
    socks = []
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port))
        healthz(sock, port)
        socks.append(sock)
    print(f"{connections} connections open ({time.time() - started:.1f} s): {rss(server.pid):.0f} MiB")
    for sock in socks:
        sock.close()
    series = []
    for _ in range(after):
        time.sleep(1)
        series.append(f"{rss(server.pid):.0f}")
    print("each second after closing, MiB:", " ".join(series))
finally:
    server.terminate()
    server.wait()
