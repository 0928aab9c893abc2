#include "test_support.hpp"
// Rank discovery from launcher environments (torchrun, strata's spawner, Slurm, OpenMPI).

#include <map>
#include <optional>

#include <sys/stat.h>

#include <fmt/format.h>

#include "job/world.hpp"
#include "strata/errors.hpp"

namespace {

using Env = std::map<std::string, std::string>;

using strata::test::lookup_in;

strata::WorldInfo world(const Env& env) {
  auto w = strata::world_from_environment(lookup_in(env));
  REQUIRE(w.has_value());
  return *w;
}

/// The message of the UsageError the environment causes ("" when none).
std::string world_error(const Env& env) {
  try {
    strata::world_from_environment(lookup_in(env));
  } catch (const strata::UsageError& e) {
    CHECK(e.exit_code() == 2);
    CHECK_FALSE(e.fix().empty());
    return e.what();
  }
  return "";
}

using strata::test::contains;

}  // namespace

TEST_CASE("world: no launcher variables means no world") {
  CHECK_FALSE(strata::world_from_environment(lookup_in({})).has_value());
  CHECK_FALSE(strata::world_from_environment(lookup_in({{"PATH", "/bin"}, {"LOCAL_RANK", "0"}})).has_value());
}

TEST_CASE("world: torchrun with every variable") {
  auto w = world({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                  {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29400"}});
  CHECK(w.rank == 5);
  CHECK(w.world_size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 4);
  CHECK(w.master_addr == "node01");
  CHECK(w.master_port == 29400);
  CHECK(w.launcher == "torchrun");
}

TEST_CASE("world: torchrun minimal single-host set takes local values and loopback by default") {
  auto w = world({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}});
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.master_addr == "127.0.0.1");
  CHECK(w.master_port == 1234);

  auto one = world({{"RANK", "0"}, {"WORLD_SIZE", "1"}});  // a world of one needs no port
  CHECK(one.world_size == 1);
  CHECK(one.master_port == 0);
}

TEST_CASE("world: strata-spawned ranks say so") {
  auto w = world({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "40000"}, {"STRATA_SPAWNED", "1"}});
  CHECK(w.launcher == "strata");
  CHECK(w.world_size == 2);
}

TEST_CASE("world: torchrun inconsistencies name the variable") {
  CHECK(contains(world_error({{"RANK", "0"}}), "WORLD_SIZE"));
  CHECK(contains(world_error({{"WORLD_SIZE", "2"}}), "RANK"));
  for (const char* bad : {"1x", "", "-1", " 1", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK(contains(world_error({{"RANK", bad}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}), "RANK='"));
  }
  CHECK(contains(world_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}), "RANK=2"));
  CHECK(contains(world_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE=0"));
  CHECK(contains(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), "MASTER_PORT"));
  CHECK(contains(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}), "MASTER_PORT='70000'"));
  CHECK(contains(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}), "MASTER_PORT='0'"));
  CHECK(contains(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"MASTER_PORT", "1"}}),
                 "LOCAL_RANK=2"));
  CHECK(contains(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}, {"MASTER_PORT", "1"}}),
                 "LOCAL_WORLD_SIZE=3"));
  // Across hosts, neither the local rank nor the master can be guessed.
  const Env multi = {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}};
  CHECK(contains(world_error(multi), "LOCAL_RANK is unset"));
  Env with_local = multi;
  with_local.insert_or_assign("LOCAL_RANK", std::string("1"));
  CHECK(contains(world_error(with_local), "MASTER_ADDR is unset"));
  with_local.insert_or_assign("MASTER_ADDR", std::string());
  CHECK(contains(world_error(with_local), "MASTER_ADDR is set but empty"));
  with_local.insert_or_assign("MASTER_ADDR", std::string("node01"));
  CHECK(world(with_local).local_rank == 1);
}

TEST_CASE("world: Slurm derives the master from the node list and the port from the job id") {
  auto w = world({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                  {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                  {"SLURM_JOB_ID", "123456"}});
  CHECK(w.rank == 5);
  CHECK(w.world_size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 4);
  CHECK(w.master_addr == "gpu07");
  CHECK(w.master_port == 20000 + 123456 % 20000);
  CHECK(w.launcher == "slurm");

  // MASTER_ADDR / MASTER_PORT win; the step's node list wins over the job's.
  auto m = world({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS_PER_NODE", "1"},
                  {"SLURM_STEP_NODELIST", "b[2-3]"}, {"SLURM_JOB_NODELIST", "a[1-3]"}, {"SLURM_JOB_ID", "7"}});
  CHECK(m.master_addr == "b2");
  CHECK(m.local_world_size == 1);
  CHECK(m.local_rank == 0);
  auto o = world({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "2"},
                  {"SLURM_NODELIST", "a1"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "5555"}});
  CHECK(o.master_addr == "head");
  CHECK(o.master_port == 5555);
}

TEST_CASE("world: Slurm tasks per node follow this node's entry") {
  Env env = {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "11"}, {"SLURM_LOCALID", "1"},
             {"SLURM_TASKS_PER_NODE", "4(x2),3"}, {"SLURM_NODELIST", "n1"}, {"SLURM_JOB_ID", "1"}};
  CHECK(world(env).local_world_size == 4);  // no SLURM_NODEID: the first count
  env.insert_or_assign("SLURM_NODEID", std::string("2"));
  CHECK(world(env).local_world_size == 3);
  env.insert_or_assign("SLURM_NODEID", std::string("3"));
  CHECK(contains(world_error(env), "SLURM_TASKS_PER_NODE='4(x2),3'"));
  env.erase("SLURM_NODEID");
  env.insert_or_assign("SLURM_TASKS_PER_NODE", std::string("4(x"));
  CHECK(contains(world_error(env), "SLURM_TASKS_PER_NODE"));
}

TEST_CASE("world: a Slurm allocation without a step of several tasks is not a job") {
  CHECK_FALSE(strata::world_from_environment(lookup_in({{"SLURM_JOB_ID", "42"}})).has_value());
  CHECK_FALSE(strata::world_from_environment(lookup_in({{"SLURM_JOB_ID", "42"}, {"SLURM_NTASKS", "1"}})).has_value());
  CHECK_FALSE(strata::world_from_environment(lookup_in({{"SLURM_JOB_ID", "42"}, {"SLURM_NTASKS", "4"}})).has_value());
}

TEST_CASE("world: a Slurm batch script, extern or interactive step is not a rank") {
  // sbatch -n 2: the batch script sees SLURM_PROCID=0 and SLURM_NTASKS=2 but is one process.
  const Env batch = {{"SLURM_JOB_ID", "42"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                     {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "node01"}};
  CHECK_FALSE(strata::world_from_environment(lookup_in(batch)).has_value());
  auto a = strata::slurm_allocation(lookup_in(batch));
  REQUIRE(a.has_value());
  CHECK(a->ntasks == 2);
  CHECK(a->job_id == "42");
  for (const char* special : {"batch", "extern", "interactive", "4294967291", "4294967292", "4294967290"}) {
    Env env = batch;
    env["SLURM_STEP_ID"] = special;
    CAPTURE(special);
    CHECK_FALSE(strata::world_from_environment(lookup_in(env)).has_value());
    CHECK(strata::slurm_allocation(lookup_in(env)).has_value());
  }
  // A step srun started (ids count from 0) is a job of ranks, and not an allocation's shell.
  Env step = batch;
  step["SLURM_STEP_ID"] = "0";
  CHECK(world(step).world_size == 2);
  CHECK(world(step).source.find("SLURM_NTASKS=2") != std::string::npos);
  CHECK_FALSE(strata::slurm_allocation(lookup_in(step)).has_value());
  step.erase("SLURM_STEP_ID");
  step["SLURM_STEPID"] = "3";  // the older spelling
  CHECK(world(step).rank == 0);
  // salloc -n1's shell: no step, one task.
  auto salloc = strata::slurm_allocation(lookup_in({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "1"}}));
  REQUIRE(salloc.has_value());
  CHECK(salloc->ntasks == 1);
  CHECK_FALSE(strata::slurm_allocation(lookup_in({})).has_value());
}

TEST_CASE("world: Kubeflow PyTorchJob pods are nodes strata launches, not ranks") {
  // The training operator sets RANK to the pod's node rank and WORLD_SIZE for the whole job.
  const Env pod = {{"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "4"}, {"PET_NODE_RANK", "1"}, {"RANK", "1"},
                   {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"}};
  CHECK_FALSE(strata::world_from_environment(lookup_in(pod)).has_value());
  auto n = strata::node_launch_from_environment(lookup_in(pod));
  REQUIRE(n.has_value());
  CHECK(n->nnodes == 2);
  CHECK(n->node_rank == 1);
  CHECK(n->nproc_per_node == 4);
  CHECK(n->master_addr == "job-master-0");
  CHECK(n->master_port == 23456);
  Env auto_pod = pod;
  auto_pod["PET_NPROC_PER_NODE"] = "auto";
  CHECK(strata::node_launch_from_environment(lookup_in(auto_pod))->nproc_per_node == 0);
  Env fixed_range = pod;
  fixed_range["PET_NNODES"] = "2:2";
  CHECK(strata::node_launch_from_environment(lookup_in(fixed_range))->nnodes == 2);
  // The ranks strata (or torchrun) starts in the pod have LOCAL_RANK: they are ranks.
  Env rank = pod;
  rank.insert({{"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}});
  rank["RANK"] = "7";
  CHECK_FALSE(strata::node_launch_from_environment(lookup_in(rank)).has_value());
  CHECK(world(rank).rank == 7);
  // Bad values are usage errors naming the variable.
  auto node_error = [](Env env) {
    try {
      strata::node_launch_from_environment(lookup_in(env));
    } catch (const strata::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Env elastic = pod;
  elastic["PET_NNODES"] = "1:4";
  CHECK(contains(node_error(elastic), "PET_NNODES='1:4'"));
  Env bad = pod;
  bad["PET_NPROC_PER_NODE"] = "cpu";
  CHECK(contains(node_error(bad), "PET_NPROC_PER_NODE='cpu'"));
  Env beyond = pod;
  beyond["PET_NODE_RANK"] = "2";
  CHECK(contains(node_error(beyond), "PET_NODE_RANK=2"));
  Env no_master = pod;
  no_master.erase("MASTER_ADDR");
  CHECK(contains(node_error(no_master), "MASTER_ADDR"));
}

TEST_CASE("world: torchrun's agent store") {
  Env env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29400"}};
  CHECK_FALSE(world(env).agent_store);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  CHECK(world(env).agent_store);
  CHECK(world(env).source == "RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK_FALSE(world(env).agent_store);
}

TEST_CASE("world: Slurm inconsistencies name the variable") {
  CHECK(contains(world_error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "1"}}), "SLURM_PROCID=4"));
  CHECK(contains(world_error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "4"}}), "SLURM_PROCID='x'"));
  // Two tasks, one per node by default, no master and no job id.
  CHECK(contains(world_error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                           {"SLURM_NODELIST", "n[1-2]"}}),
                 "SLURM_JOB_ID"));
  CHECK(contains(world_error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"},
                           {"SLURM_JOB_ID", "3"}, {"SLURM_NODELIST", "n[1-2]"}}),
                 "SLURM_LOCALID=1"));
}

TEST_CASE("world: OpenMPI") {
  auto w = world({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "h0"}});
  CHECK(w.rank == 3);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.master_addr == "h0");
  CHECK(w.master_port == 29500);
  CHECK(w.launcher == "openmpi");

  auto local = world({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_PORT", "9"}});
  CHECK(local.master_addr == "127.0.0.1");
  CHECK(local.master_port == 9);

  CHECK(contains(world_error({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                 "MASTER_ADDR"));
  CHECK(contains(world_error({{"OMPI_COMM_WORLD_RANK", "0"}}), "OMPI_COMM_WORLD_SIZE"));
}

TEST_CASE("world: torchrun wins over Slurm and OpenMPI, Slurm over OpenMPI") {
  auto w = world({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "3000"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"},
                  {"SLURM_NTASKS", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  CHECK(w.launcher == "torchrun");
  CHECK(w.rank == 1);
  auto s = world({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(s.launcher == "slurm");
  CHECK(s.world_size == 1);
}

TEST_CASE("world: first host of a Slurm node list") {
  CHECK(strata::first_slurm_host("") == "");
  CHECK(strata::first_slurm_host("node01") == "node01");
  CHECK(strata::first_slurm_host("node[01-04]") == "node01");
  CHECK(strata::first_slurm_host("node[03-05,07],gpu12") == "node03");
  CHECK(strata::first_slurm_host("a-b[1,3]") == "a-b1");
  CHECK(strata::first_slurm_host("gpu12,node[01-02]") == "gpu12");
  CHECK(strata::first_slurm_host("node[007-010]") == "node007");
  CHECK(strata::first_slurm_host("rack[2-3]-n[05-06]") == "rack2-n05");
}

#include "comm/job_guard.hpp"

TEST_CASE("world: one host only where the launcher said so, or the master is loopback") {
  using strata::detail::one_host;
  // torchrun and strata's own launcher always say how many ranks run here.
  auto w = world({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29500"}});
  CHECK(w.local_world_size_known);
  CHECK(one_host(w));
  CHECK(strata::detail::store_host(w) == "127.0.0.1");
  // Started by hand on several hosts, without LOCAL_WORLD_SIZE: it may span hosts, so the store
  // is where MASTER_ADDR says (as before loopback-only listening).
  w = world({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29500"}});
  CHECK_FALSE(w.local_world_size_known);
  CHECK(w.local_world_size == 2);  // the default, still
  CHECK_FALSE(one_host(w));
  CHECK(strata::detail::store_host(w) == "10.0.0.5");
  // ... unless MASTER_ADDR is loopback (unset defaults to it), which no other host reaches.
  w = world({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}});
  CHECK(one_host(w));
  w = world({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
  CHECK(one_host(w));
  // strata's launcher of one node.
  w = world({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "29500"}, {"STRATA_SPAWNED", "1"}});
  CHECK(one_host(w));
  // ... of two nodes.
  w = world({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "29500"}, {"STRATA_SPAWNED", "1"}});
  CHECK_FALSE(one_host(w));
  // Slurm: srun's per-node count is known; its default of one task per node is not.
  w = world({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_STEP_ID", "0"},
             {"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "node[1-2]"}});
  CHECK(w.local_world_size_known);
  CHECK(one_host(w));
  w = world({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "42"},
             {"SLURM_JOB_NODELIST", "node1"}});
  CHECK_FALSE(w.local_world_size_known);
  CHECK(one_host(w));  // a job of one rank is on one host
  // OpenMPI always sets its local size.
  w = world({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "node1"}});
  CHECK(one_host(w));
}

// ---- the job's secret and the seal of the messages that steer the job ----------------------------

namespace {

std::string hex(const std::array<std::uint8_t, 32>& bytes) {
  std::string out;
  for (auto b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

}  // namespace

using strata::test::ScopedEnv;

TEST_CASE("job seal: SHA-256 and HMAC-SHA256 give the published test vectors") {
  using strata::detail::hmac_sha256;
  using strata::detail::sha256;
  CHECK(hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // RFC 4231 test cases 2 and 6 (a key longer than a block).
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("job seal: a sealed value opens only under its secret, scope and key, unaltered") {
  const strata::detail::JobSeal seal("0123456789abcdef0123", "strata/0/kv");
  const std::string sealed = seal.seal("run_dir", "/runs/a");
  CHECK(seal.open("run_dir", sealed) == std::optional<std::string>("/runs/a"));
  CHECK_FALSE(seal.open("run_dir", "/runs/a"));                    // unsealed: a stranger's
  CHECK_FALSE(seal.open("resume", sealed));                        // another key
  CHECK_FALSE(strata::detail::JobSeal("0123456789abcdef0124", "strata/0/kv").open("run_dir", sealed));
  CHECK_FALSE(strata::detail::JobSeal("0123456789abcdef0123", "strata/1/kv").open("run_dir", sealed));
  std::string altered = sealed;
  altered[1] = 'R';
  CHECK_FALSE(seal.open("run_dir", altered));
  altered = sealed;
  altered.back() = altered.back() == '0' ? '1' : '0';
  CHECK_FALSE(seal.open("run_dir", altered));
  // Without a secret nothing is sealed and everything opens (a job started without one).
  const strata::detail::JobSeal none;
  CHECK(none.seal("run_dir", "/runs/a") == "/runs/a");
  CHECK(none.open("run_dir", "anything") == std::optional<std::string>("anything"));
}

TEST_CASE("job secret: from the environment or a file of its owner's, at least 16 characters") {
  strata::test::TempDir dir;
  ScopedEnv value("STRATA_JOB_SECRET", std::nullopt), file("STRATA_JOB_SECRET_FILE", std::nullopt);
  CHECK(strata::detail::read_job_secret().empty());
  {
    ScopedEnv set("STRATA_JOB_SECRET", "short");
    CHECK_THROWS_WITH_AS(strata::detail::read_job_secret(), doctest::Contains("has 5 characters"), strata::UsageError);
  }
  const auto path = dir.write("secret", "0123456789abcdef0123\n");
  ::chmod(path.c_str(), 0644);
  ScopedEnv set_file("STRATA_JOB_SECRET_FILE", path.c_str());
  CHECK_THROWS_WITH_AS(strata::detail::read_job_secret(), doctest::Contains("readable by other users (mode 644)"),
                       strata::UsageError);
  ::chmod(path.c_str(), 0600);
  CHECK(strata::detail::read_job_secret() == "0123456789abcdef0123");
  ScopedEnv set("STRATA_JOB_SECRET", "fedcba9876543210fedc");  // the variable wins over the file
  CHECK(strata::detail::read_job_secret() == "fedcba9876543210fedc");
}
