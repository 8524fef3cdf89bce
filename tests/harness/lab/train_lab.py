"""The `train` stage of make test: dlinfra.gpu_cluster.train (playbooks/train.yml) on the lab the stages before left
converged, with real PyTorch (Debian 13's python3-torch 2.6, gloo on the CPU): 2 nodes x 2 ranks read the staged
yt8m-mini through their hand-offs.

  1. refused before anything starts: a dataset not staged; a node of the world left out (--limit); a rank count that
     differs from the hand-off, a staging run holding the dataset's lock and an empty command, together. Each message
     names the host and the dataset; no unit of the job exists afterwards.
  2. one epoch: from the ranks' own records, every sample of the dataset read exactly once across the world, every rank
     the same steps, the all-reduce of a known tensor right and the replicas equal at the end.
  3. a rank killed (kill -9) in the middle of an epoch: the run fails naming it, and no rank is left running on any
     node; while it ran, a second run was refused naming the running job. The re-run resumes at the newest checkpoint
     both nodes hold, and the epoch's records again hold every sample exactly once.
"""
import json
import subprocess
import time

from lab import ROOT, USER_INVENTORY, Stage

STAGE = Stage("train-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh
WORK = ROOT / ".cache" / "train"
DATASET = "yt8m-mini"
DEST = "/srv/ssd/" + DATASET
NODES = ("sim-gpu1", "sim-gpu2")
JOB_ROOT = "/var/lib/dlinfra/train"


def start(name, *extra):
    command = ["ansible-playbook", "playbooks/train.yml", "-i", str(USER_INVENTORY),
               "-e", "demo_cache_dir=%s" % (ROOT / ".cache" / "demo"), "-e", "train_dataset=" + DATASET] + list(extra)
    log = open(WORK / (name + ".log"), "w")
    return name, subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), time.monotonic()


def finish(run, expect_ok):
    name, process, began = run
    code = process.wait()
    text = (WORK / (name + ".log")).read_text()
    print("train-lab: run %s: exit %d in %.0f s (log %s)" % (name, code, time.monotonic() - began, WORK / (name + ".log")),
          flush=True)
    if (code == 0) != expect_ok:
        print(text[-5000:])
        fail("run %s exited %d, expected %s" % (name, code, "0" if expect_ok else "a failure"))
    return text


def expect_in(name, text, *wanted):
    missing = [line for line in wanted if line not in text]
    if missing:
        print(text[-5000:])
        fail("run %s does not say %s" % (name, " / ".join(repr(line) for line in missing)))


def units_left(job):
    """Units of the job still running on any node, and train_ddp processes."""
    left = []
    for node in NODES:
        listed = sh(node, "systemctl list-units --all --plain --no-legend 'dlinfra-train-%s-rank-*' | awk '$4 == \"running\"'"
                    % job)
        processes = sh(node, "ps -eo args | grep '[t]rain_ddp.py' || true")
        left += [node + ": " + line for line in (listed + processes).splitlines() if line.strip()]
    return left


def dataset_samples():
    """SHARD/KEY of every sample of every shard staged on the nodes, read from the tars themselves."""
    script = ("python3 -c \"import os,tarfile\nfor p in open('%s/shards.txt').read().split():\n"
              " names=sorted({m.name.split('.',1)[0] for m in tarfile.open(p)})\n"
              " print('\\n'.join(os.path.basename(p)+'/'+n for n in names))\"" % DEST)
    return [line for node in NODES for line in sh(node, script).split()]


def progress(job):
    ranks = {}
    for node in NODES:
        for line in sh(node, "cat %s/%s/progress/rank-*.json; echo" % (JOB_ROOT, job)).replace("}{", "}\n{").splitlines():
            if line.strip():
                record = json.loads(line)
                ranks[record["rank"]] = record
    return ranks


def read_once(job, epoch, everything):
    """The ranks' records of an epoch hold every sample at most once; returns (lines per rank, samples read)."""
    read, per_rank = [], {}
    for node in NODES:
        for path in sh(node, "ls %s/%s/samples/*.epoch-%d.txt" % (JOB_ROOT, job, epoch)).split():
            lines = sh(node, "cat " + path).split()
            per_rank[path.rsplit("/", 1)[1]] = len(lines)
            read += lines
    twice = sorted({key for key in read if read.count(key) > 1})
    if twice:
        fail("job %s read %d samples more than once in epoch %d, e.g. %s" % (job, len(twice), epoch, twice[:3]))
    strangers = sorted(set(read) - set(everything))
    if strangers:
        fail("job %s read samples that are not in the staged shards: %s" % (job, strangers[:3]))
    return per_rank, set(read)


def check_epoch(job, everything, ranks):
    per_rank, read = read_once(job, 0, everything)
    progress_of = progress(job)
    if sorted(progress_of) != list(range(ranks)):
        fail("job %s: progress of ranks %s, expected 0..%d" % (job, sorted(progress_of), ranks - 1))
    states = {rank: (p["state"], p["step"], p["steps"], p["allreduce_ok"], p["replicas_equal"])
              for rank, p in progress_of.items()}
    steps = {p["steps"] for p in progress_of.values()}
    if len(steps) != 1 or any(s[0] != "done" or s[1] != s[2] or not s[3] or not s[4] for s in states.values()):
        fail("job %s: the ranks did not all end done at the same step with the all-reduce right: %s" % (job, states))
    batch = progress_of[0]["batch_size"]
    if set(per_rank.values()) != {steps.pop() * batch}:
        fail("job %s: the ranks' records hold %s samples, not steps x batch each" % (job, per_rank))
    if read != set(everything):
        fail("job %s: %d of the dataset's %d samples were not read in the epoch (the plan leaves none unread here)"
             % (job, len(set(everything) - read), len(everything)))
    return progress_of


def refusals():
    step("1. refused before anything starts")
    sh("sim-gpu2", "systemd-run --unit dlinfra-test-staging-lock flock %s/.shard_fetch.lock sleep 120" % DEST)
    runs = [start("refused-not-staged", "-e", "train_dataset=not-staged"),
            start("refused-node-left-out", "--limit", "sim-gpu1"),
            start("refused-together", "-e", "train_nproc_per_node=3", "-e", '{"train_command": [""]}')]
    texts = {run[0]: finish(run, expect_ok=False) for run in runs}
    sh("sim-gpu2", "systemctl stop dlinfra-test-staging-lock")
    expect_in("refused-not-staged", texts["refused-not-staged"], "dataset not-staged: no host of the play")
    expect_in("refused-node-left-out", texts["refused-node-left-out"],
              "dataset %s: hosts sim-gpu1 hold plan" % DATASET, "lacks node rank(s) 1")
    expect_in("refused-together", texts["refused-together"],
              "sim-gpu1, dataset %s: train_nproc_per_node is 3, but its hand-off has 2 rank lists" % DATASET,
              "sim-gpu2, dataset %s: a shard_staging run is still writing %s" % (DATASET, DEST),
              "train_command starts with an empty word")
    for node in NODES:
        if sh(node, "systemctl list-units --all --plain --no-legend 'dlinfra-train-*' | awk '$3 == \"active\"'").strip():
            fail("a refused run started units on %s" % node)
    print("train-lab: each bad input stopped the run before anything started, naming the host and the dataset")


def one_epoch(everything):
    step("2. one epoch over 2 nodes x 2 ranks")
    sh("sim-gpu1", "rm -rf %s/epoch" % JOB_ROOT)
    text = finish(start("epoch", "-e", "train_job=epoch"), expect_ok=True)
    expect_in("epoch", text, "rank 0 on sim-gpu1: done", "rank 3 on sim-gpu2: done", "samples/s")
    ranks = check_epoch("epoch", everything, 4)
    print("train-lab: %d samples, each read once by one of 4 ranks; %s samples/s per rank; all-reduce right, replicas "
          "equal" % (len(everything), [ranks[rank]["samples_per_s"] for rank in sorted(ranks)]))


def wait_for(condition, what, timeout=300):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            fail("waited %d s for %s" % (timeout, what))
        time.sleep(0.5)


def kill_and_resume(everything):
    step("3. rank 3 killed in the middle of the epoch; the re-run resumes from the checkpoint")
    job = ["-e", "train_job=resume", "-e", "train_step_seconds=0.5", "-e", "train_checkpoint_every=10"]
    for node in NODES:
        sh(node, "rm -rf %s/resume" % JOB_ROOT)
    running = start("killed", *job)
    # 40 steps of at least 0.5 s: the refused run goes while the job runs, and the kill lands mid-epoch after the
    # checkpoint of step 10, however busy the machine is.

    def rank3():
        return json.loads(sh("sim-gpu2", "cat %s/resume/progress/rank-0003.json 2>/dev/null || echo {}" % JOB_ROOT))

    wait_for(lambda: rank3().get("state") == "running", "rank 3 of job resume to start")
    again = finish(start("refused-running", *job), expect_ok=False)
    expect_in("refused-running", again, "job resume is still running", "train_stop=true")
    wait_for(lambda: rank3().get("step", 0) >= 15, "rank 3 of job resume to reach step 15")
    pid = rank3()["pid"]
    sh("sim-gpu2", "kill -9 %d" % pid)
    text = finish(running, expect_ok=False)
    # Rank 2, beside it, fails too when gloo loses its peer: both are named.
    expect_in("killed", text, "train: job resume on sim-gpu2: rank unit(s) failed:", "dlinfra-train-resume-rank-0003.service",
              "status=9/KILL")
    left = units_left("resume")
    if left:
        fail("ranks left running after the failed job: %s" % left)
    held = [set(int(name[5:13]) for name in sh(node, "ls %s/resume/checkpoints" % JOB_ROOT).split()) for node in NODES]
    common = max(held[0] & held[1])
    text = finish(start("resumed", *job), expect_ok=True)
    ranks = check_epoch("resume", everything, 4)
    resumed = {rank: record["resumed_at"] for rank, record in ranks.items()}
    if set(resumed.values()) != {common}:
        fail("the ranks resumed at %s, not at step %d, the newest checkpoint both nodes hold" % (resumed, common))
    expect_in("resumed", text, "resumed at step %d" % common)
    print("train-lab: killed at step >= 15, nothing left running, a second run refused meanwhile; resumed at step %d; "
          "the epoch's records hold every sample once" % common)


def main():
    if not (USER_INVENTORY / "hosts.yml").exists():
        fail("%s is missing: this stage runs on the lab the as-a-user stage converged" % USER_INVENTORY)
    WORK.mkdir(parents=True, exist_ok=True)
    everything = dataset_samples()
    refusals()
    one_epoch(everything)
    kill_and_resume(everything)
    print("train-lab: passed; the logs are under %s" % WORK)


if __name__ == "__main__":
    main()
