"""A gang task that finds its peers the way distributed training does, from
the environment the agent sets: rank 0 listens on MASTER_ADDR:MASTER_PORT,
every other rank connects and sends its rank, rank 0 sends back the sum of
all ranks (an all-reduce), and every rank checks it. It also checks the
JAX variables and the MPI-style hostfile against the PyTorch ones.

Usage: rendezvous.py [BARRIER_DIR COUNT]. With a barrier, rank 0 writes
BARRIER_DIR/<job id>.bound once it listens and waits until COUNT such files
exist before serving, so COUNT gangs provably hold their ports at once.

Prints one line "rank=R local_rank=L local_world=W node_rank=N sum=S port=P"
and exits 0 when every check passed."""

import os
import socket
import sys
import time

DEADLINE_S = 60


def env(name):
    value = os.environ.get(name)
    if value is None:
        sys.exit(f"{name} is not set")
    return value


def receive_line(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        data += chunk
    return data.decode().strip()


def wait_barrier(directory, count):
    deadline = time.monotonic() + DEADLINE_S
    while len([f for f in os.listdir(directory) if f.endswith(".bound")]) < count:
        if time.monotonic() > deadline:
            sys.exit(f"barrier: fewer than {count} gangs bound their ports")
        time.sleep(0.05)


def main():
    addr, port = env("MASTER_ADDR"), int(env("MASTER_PORT"))
    world, rank = int(env("WORLD_SIZE")), int(env("RANK"))
    local_rank, local_world = int(env("LOCAL_RANK")), int(env("LOCAL_WORLD_SIZE"))
    node_rank = int(env("NODE_RANK"))
    if env("JAX_COORDINATOR_ADDRESS") != f"{addr}:{port}":
        sys.exit("JAX_COORDINATOR_ADDRESS differs from MASTER_ADDR:MASTER_PORT")
    if (int(env("JAX_NUM_PROCESSES")), int(env("JAX_PROCESS_ID"))) != (world, rank):
        sys.exit("JAX_NUM_PROCESSES/JAX_PROCESS_ID differ from WORLD_SIZE/RANK")
    with open(env("FERRY_HOSTFILE")) as f:
        hosts = [line.split() for line in f if line.strip()]
    if sum(int(slots.split("=")[1]) for _, slots in hosts) != world:
        sys.exit(f"hostfile slots do not add up to WORLD_SIZE: {hosts}")
    if hosts[0][0] != addr or int(hosts[node_rank][1].split("=")[1]) != local_world:
        sys.exit(f"hostfile does not match MASTER_ADDR/LOCAL_WORLD_SIZE: {hosts}")

    expected = world * (world - 1) // 2
    if rank == 0:
        server = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((addr, port))
        except OSError as e:
            sys.exit(f"rank 0 cannot listen on {addr}:{port}: {e}")
        server.listen(world)
        if len(sys.argv) == 3:
            open(os.path.join(sys.argv[1], env("FERRY_JOB_ID") + ".bound"), "w").close()
            wait_barrier(sys.argv[1], int(sys.argv[2]))
        server.settimeout(DEADLINE_S)
        peers, total = [], 0
        while len(peers) < world - 1:
            conn, _ = server.accept()
            conn.settimeout(DEADLINE_S)
            total += int(receive_line(conn))
            peers.append(conn)
        for conn in peers:
            conn.sendall(f"{total}\n".encode())
            conn.close()
        server.close()
    else:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"rank {rank} cannot reach {addr}:{port}")
                time.sleep(0.05)
        conn.settimeout(DEADLINE_S)
        conn.sendall(f"{rank}\n".encode())
        total = int(receive_line(conn))
        conn.close()
    print(f"rank={rank} local_rank={local_rank} local_world={local_world} "
          f"node_rank={node_rank} sum={total} port={port}", flush=True)
    sys.exit(0 if total == expected else f"sum {total} != {expected}")


if __name__ == "__main__":
    main()
