#include "fleet/sim/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "testing/test_util.h"

namespace ferry::fleet::sim {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(FERRY_TRACE_TESTDATA) + "/" + name;
}

std::vector<TraceJob> SampleJobs() {
  TraceJob a;
  a.id = "train-1";
  a.tenant = "vision";
  a.team = "detection";
  a.user = "ana";
  a.submit_s = 12.5;
  a.duration_s = 3600.125;
  a.tasks = 4;
  a.gpus_per_task = 8;
  a.gpu_model = "H100";
  a.cpus_per_task = 0.1;
  a.memory_mb_per_task = 65536;
  a.priority = -3;
  a.preemptible = true;
  a.max_runtime_s = 7200;
  a.datasets = {"imagenet", "coco"};
  TraceJob b;
  b.id = "eval, \"quoted\"";
  b.tenant = " spaced tenant ";
  b.user = "bo";
  b.submit_s = 1e-7;
  b.duration_s = 0.30000000000000004;
  b.tasks = 1;
  b.gpus_per_task = 0;
  TraceJob c = b;
  c.id = "late";
  c.submit_s = 123456.789;
  c.datasets = {"one dataset"};
  return {b, a, c};  // b and c sort around a by submit_s
}

// ---- Round trips

TEST(TraceFormat, CsvRoundTrip) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto jobs = SampleJobs();
  std::sort(jobs.begin(), jobs.end(),
            [](const TraceJob& x, const TraceJob& y) { return x.submit_s < y.submit_s; });
  std::string path = dir / "trace.csv";
  ASSERT_OK(WriteTrace(path, jobs));
  ASSERT_OK_AND_ASSIGN(auto back, ReadTrace(path));
  EXPECT_EQ(back, jobs);
}

TEST(TraceFormat, JsonRoundTrip) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto jobs = SampleJobs();
  std::sort(jobs.begin(), jobs.end(),
            [](const TraceJob& x, const TraceJob& y) { return x.submit_s < y.submit_s; });
  std::string path = dir / "trace.json";
  ASSERT_OK(WriteTrace(path, jobs));
  ASSERT_OK_AND_ASSIGN(auto back, ReadTrace(path));
  EXPECT_EQ(back, jobs);
}

TEST(TraceFormat, SortsStablyBySubmitTime) {
  std::string csv =
      "id,tenant,submit_s,duration_s,tasks,gpus_per_task\n"
      "c,t,5,1,1,1\n"
      "a,t,1,1,1,1\n"
      "b,t,5,1,1,1\n"
      "d,t,1,1,1,1\n";
  ASSERT_OK_AND_ASSIGN(auto jobs, ParseTraceCsv(csv, "t.csv"));
  std::vector<std::string> ids;
  ids.reserve(jobs.size());
  for (const auto& j : jobs) ids.push_back(j.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "d", "c", "b"}));
}

TEST(TraceFormat, CsvOptionalColumnsDefaultAndColumnOrderIsFree) {
  std::string csv =
      "gpus_per_task,tasks,duration_s,submit_s,tenant,id,datasets,preemptible\r\n"
      "\r\n"
      " 2 , 3 ,10.5,0,vision,j1, a ; b ,1\r\n";
  ASSERT_OK_AND_ASSIGN(auto jobs, ParseTraceCsv(csv, "t.csv"));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, "j1");
  EXPECT_EQ(jobs[0].tasks, 3);
  EXPECT_EQ(jobs[0].gpus_per_task, 2);
  EXPECT_EQ(jobs[0].duration_s, 10.5);
  EXPECT_EQ(jobs[0].datasets, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(jobs[0].preemptible);
  EXPECT_EQ(jobs[0].priority, 0);
  EXPECT_EQ(jobs[0].max_runtime_s, 0);
  EXPECT_EQ(jobs[0].gpu_model, "");
}

TEST(TraceFormat, DocumentationExamplesParse) {
  // The examples in docs/fleet-traces.md.
  std::string csv =
      "id,tenant,team,user,submit_s,duration_s,tasks,gpus_per_task,gpu_model,cpus_per_task,"
      "memory_mb_per_task,priority,preemptible,max_runtime_s,datasets\n"
      "train-1,vision,detection,ana,0,3600,4,8,H100,16,131072,10,false,7200,imagenet;coco\n"
      "eval-7,vision,,bo,12.5,300,1,1,,4,16384,0,true,0,\n";
  ASSERT_OK_AND_ASSIGN(auto jobs, ParseTraceCsv(csv, "t.csv"));
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].datasets, (std::vector<std::string>{"imagenet", "coco"}));
  EXPECT_TRUE(jobs[1].preemptible);
  std::string js = R"({"jobs": [
  {"id": "train-1", "tenant": "vision", "team": "detection", "user": "ana",
   "submit_s": 0, "duration_s": 3600, "tasks": 4, "gpus_per_task": 8,
   "gpu_model": "H100", "priority": 10, "datasets": ["imagenet", "coco"]}
]})";
  ASSERT_OK_AND_ASSIGN(auto from_json, ParseTraceJson(js, "t.json"));
  ASSERT_EQ(from_json.size(), 1u);
  EXPECT_EQ(from_json[0].priority, 10);
}

TEST(TraceFormat, JsonAcceptsBareArray) {
  std::string js = R"([{"id":"x","tenant":"t","submit_s":3,"duration_s":1,"tasks":1,
                        "gpus_per_task":1,"datasets":["d"]},
                       {"id":"y","tenant":"t","submit_s":1,"duration_s":1,"tasks":2,
                        "gpus_per_task":4}])";
  ASSERT_OK_AND_ASSIGN(auto jobs, ParseTraceJson(js, "t.json"));
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, "y");
  EXPECT_EQ(jobs[1].datasets, (std::vector<std::string>{"d"}));
}

// ---- CSV validation: every error, with its line and column

std::string CsvError(const std::string& text) {
  auto r = ParseTraceCsv(text, "t.csv");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalid);
  return r.status().message();
}

const char* kHeader = "id,tenant,submit_s,duration_s,tasks,gpus_per_task\n";

TEST(TraceCsvErrors, Header) {
  EXPECT_EQ(CsvError(""), "t.csv: empty file, expected a header row");
  EXPECT_EQ(CsvError("\n\n"), "t.csv: empty file, expected a header row");
  EXPECT_EQ(CsvError("id,tenant,colour\n"), "t.csv:1: colour: unknown column");
  EXPECT_EQ(CsvError("\nid,tenant,id\n"), "t.csv:2: id: duplicate column");
  EXPECT_EQ(CsvError("id,tenant,submit_s,duration_s,gpus_per_task\n"),
            "t.csv:1: tasks: missing required column");
  EXPECT_EQ(CsvError("id,\"tenant\n"), "t.csv:1: unterminated quoted field");
}

TEST(TraceCsvErrors, Rows) {
  auto row = [](const std::string& line) { return CsvError(std::string(kHeader) + line + "\n"); };
  EXPECT_EQ(row("j,t,0,1,1"), "t.csv:2: expected 6 fields, got 5");
  EXPECT_EQ(row("j,t,soon,1,1,1"), "t.csv:2: submit_s: expected a number, got 'soon'");
  EXPECT_EQ(row("j,t,0,inf,1,1"), "t.csv:2: duration_s: expected a number, got 'inf'");
  EXPECT_EQ(row("j,t,0,1,1.5,1"), "t.csv:2: tasks: expected an integer, got '1.5'");
  EXPECT_EQ(row("j,t,0,1,1,99999999999"), "t.csv:2: gpus_per_task: out of range: 99999999999");
  EXPECT_EQ(row("j,t,0,1,0,1"), "t.csv:2: tasks: must be >= 1");
  EXPECT_EQ(row("j,t,0,1,1,-1"), "t.csv:2: gpus_per_task: must be >= 0");
  EXPECT_EQ(row("j,t,-1,1,1,1"), "t.csv:2: submit_s: must be >= 0");
  EXPECT_EQ(row("j,t,0,-1,1,1"), "t.csv:2: duration_s: must be >= 0");
  EXPECT_EQ(row(",t,0,1,1,1"), "t.csv:2: id: must not be empty");
  EXPECT_EQ(row("j,,0,1,1,1"), "t.csv:2: tenant: must not be empty");
  EXPECT_EQ(row("j,t\"x,0,1,1,1"), "t.csv:2: stray quote inside an unquoted field");
  EXPECT_EQ(row("j,\"t\"x,0,1,1,1"), "t.csv:2: text after a closing quote");
}

TEST(TraceCsvErrors, OptionalColumns) {
  std::string header = "id,tenant,submit_s,duration_s,tasks,gpus_per_task,";
  auto one = [&](const std::string& column, const std::string& value) {
    return CsvError(header + column + "\nj,t,0,1,1,1," + value + "\n");
  };
  EXPECT_EQ(one("preemptible", "maybe"),
            "t.csv:2: preemptible: expected true or false, got 'maybe'");
  EXPECT_EQ(one("datasets", "a;;b"), "t.csv:2: datasets: empty dataset name in 'a;;b'");
  EXPECT_EQ(one("cpus_per_task", "-2"), "t.csv:2: cpus_per_task: must be >= 0");
  EXPECT_EQ(one("memory_mb_per_task", "-1"), "t.csv:2: memory_mb_per_task: must be >= 0");
  EXPECT_EQ(one("memory_mb_per_task", "1e3"),
            "t.csv:2: memory_mb_per_task: expected an integer, got '1e3'");
  EXPECT_EQ(one("max_runtime_s", "-5"), "t.csv:2: max_runtime_s: must be >= 0");
  EXPECT_EQ(one("priority", "high"), "t.csv:2: priority: expected an integer, got 'high'");
}

TEST(TraceCsvErrors, DuplicateIdNamesBothLines) {
  EXPECT_EQ(CsvError(std::string(kHeader) + "j1,t,0,1,1,1\n\nj1,t,2,1,1,1\n"),
            "t.csv:4: id: duplicate id 'j1' (first on line 2)");
}

// ---- JSON validation

std::string JsonError(const std::string& text) {
  auto r = ParseTraceJson(text, "t.json");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalid);
  return r.status().message();
}

std::string JobJson(const std::string& extra) {
  return R"({"id":"a","tenant":"t","submit_s":0,"duration_s":1,"tasks":1,"gpus_per_task":1)" +
         extra + "}";
}

TEST(TraceJsonErrors, Document) {
  EXPECT_EQ(JsonError("[{"), "t.json: invalid JSON at byte 3");
  EXPECT_EQ(JsonError("[{\"id\": 1e999}]").rfind("t.json: invalid JSON", 0), 0u);
  EXPECT_EQ(JsonError("42"), "t.json: expected an array of jobs or an object with \"jobs\"");
  EXPECT_EQ(JsonError("{}"), "t.json: jobs: missing required field");
  EXPECT_EQ(JsonError(R"({"jobs":[],"version":1})"), "t.json: version: unknown field");
  EXPECT_EQ(JsonError(R"({"jobs":{}})"), "t.json: jobs: expected an array");
  EXPECT_EQ(JsonError("[" + JobJson("") + ",7]"), "t.json: jobs[1]: expected an object");
}

TEST(TraceJsonErrors, Fields) {
  auto one = [](const std::string& extra) { return JsonError("[" + JobJson(extra) + "]"); };
  EXPECT_EQ(JsonError(R"({"jobs":[{"id":"a","tenant":"t","submit_s":0,"duration_s":1,
                                   "gpus_per_task":1}]})"),
            "t.json: jobs[0].tasks: missing required field");
  EXPECT_EQ(one(R"(,"colour":"red")"), "t.json: jobs[0].colour: unknown field");
  EXPECT_EQ(one(R"(,"team":5)"), "t.json: jobs[0].team: expected a string");
  EXPECT_EQ(one(R"(,"cpus_per_task":"2")"), "t.json: jobs[0].cpus_per_task: expected a number");
  EXPECT_EQ(one(R"(,"priority":1.5)"), "t.json: jobs[0].priority: expected an integer");
  EXPECT_EQ(one(R"(,"memory_mb_per_task":18446744073709551615)"),
            "t.json: jobs[0].memory_mb_per_task: out of range");
  EXPECT_EQ(one(R"(,"preemptible":"yes")"), "t.json: jobs[0].preemptible: expected true or false");
  EXPECT_EQ(one(R"(,"datasets":"d")"), "t.json: jobs[0].datasets: expected an array of strings");
  EXPECT_EQ(one(R"(,"datasets":["d",3])"), "t.json: jobs[0].datasets[1]: expected a string");
  EXPECT_EQ(one(R"(,"datasets":["d",""])"), "t.json: jobs[0].datasets: empty dataset name");
  EXPECT_EQ(one(R"(,"datasets":["a;b"])"),
            "t.json: jobs[0].datasets: dataset name 'a;b' contains ';'");
  EXPECT_EQ(one(R"(,"user":"a\nb")"), "t.json: jobs[0].user: must not contain line breaks");
  EXPECT_EQ(one(R"(,"max_runtime_s":-1)"), "t.json: jobs[0].max_runtime_s: must be >= 0");
}

TEST(TraceJsonErrors, ValidationNamesTheJob) {
  std::string js = "[" + JobJson("") + "," + JobJson("").replace(7, 1, "b") + "," +
                   JobJson("").replace(7, 1, "c") + "," +
                   R"({"id":"d","tenant":"t","submit_s":0,"duration_s":1,"tasks":0,
                       "gpus_per_task":1}])";
  EXPECT_EQ(JsonError(js), "t.json: jobs[3].tasks: must be >= 1");
  EXPECT_EQ(JsonError("[" + JobJson("") + "," + JobJson("") + "]"),
            "t.json: jobs[1].id: duplicate id 'a' (first at jobs[0])");
  EXPECT_EQ(JsonError(R"([{"id":"a","tenant":"t","submit_s":0,"duration_s":1,
                          "tasks":3000000000,"gpus_per_task":1}])"),
            "t.json: jobs[0].tasks: out of range");
}

TEST(TraceFiles, ReadAndWriteErrors) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  auto r = ReadTrace(dir / "trace.txt");
  EXPECT_EQ(r.status().message(),
            (dir / "trace.txt") + ": unknown trace format (use .csv or .json)");
  r = ReadTrace(dir / "missing.csv");
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(r.status().message(), (dir / "missing.csv") + ": cannot open file");
  std::string csv = dir.Write("bad.csv", std::string(kHeader) + "j,t,0,1,0,1\n");
  EXPECT_EQ(ReadTrace(csv).status().message(), csv + ":2: tasks: must be >= 1");

  auto jobs = SampleJobs();
  jobs[1].tasks = 0;
  std::string out = dir / "out.json";
  EXPECT_EQ(WriteTrace(out, jobs).message(), out + ": jobs[1].tasks: must be >= 1");
  EXPECT_FALSE(fs::exists(out));
  jobs = SampleJobs();
  jobs[2].id = jobs[0].id;
  EXPECT_EQ(WriteTrace(dir / "o.csv", jobs).message(),
            (dir / "o.csv") + ": jobs[2].id: duplicate id '" + jobs[0].id + "'");
  EXPECT_FALSE(WriteTrace(dir / "o.yaml", SampleJobs()).ok());
}

// ---- Importers

TEST(ImportPhilly, MapsJobsAndCountsSkips) {
  ImportStats stats;
  ASSERT_OK_AND_ASSIGN(auto jobs, ImportPhilly(Fixture("philly_cluster_job_log"), {}, &stats));
  EXPECT_EQ(stats.read, 8);
  EXPECT_EQ(stats.kept, 3);
  EXPECT_EQ(stats.skipped, (std::map<std::string, int64_t>{{"bad_time", 1},
                                                           {"malformed", 1},
                                                           {"never_ran", 1},
                                                           {"no_end_time", 1},
                                                           {"no_gpus", 1}}));
  EXPECT_EQ(stats.skipped_total(), 5);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, "application_1506638472019_10238");
  EXPECT_EQ(jobs[0].tenant, "6214e9");
  EXPECT_EQ(jobs[0].user, "a3d2b1");
  EXPECT_EQ(jobs[0].submit_s, 0);
  EXPECT_EQ(jobs[0].duration_s, 3600);
  EXPECT_EQ(jobs[0].tasks, 1);
  EXPECT_EQ(jobs[0].gpus_per_task, 2);
  // Two 8-GPU nodes, two attempts: 600 s + 300 s.
  EXPECT_EQ(jobs[1].id, "application_1506638472019_10240");
  EXPECT_EQ(jobs[1].submit_s, 120);
  EXPECT_EQ(jobs[1].duration_s, 900);
  EXPECT_EQ(jobs[1].tasks, 2);
  EXPECT_EQ(jobs[1].gpus_per_task, 8);
  // An attempt that never started is ignored; uneven nodes ask for the larger share.
  EXPECT_EQ(jobs[2].tenant, "e13805");
  EXPECT_EQ(jobs[2].submit_s, 6831);
  EXPECT_EQ(jobs[2].duration_s, 45);
  EXPECT_EQ(jobs[2].tasks, 2);
  EXPECT_EQ(jobs[2].gpus_per_task, 4);
  for (const auto& j : jobs) ASSERT_OK(ValidateJob(j));
}

TEST(ImportPhilly, OptionsWindowMaxJobsAndModel) {
  ImportOptions options;
  options.window_start_s = 100;
  options.gpu_model = "P100";
  ImportStats stats;
  ASSERT_OK_AND_ASSIGN(auto jobs, ImportPhilly(Fixture("philly_cluster_job_log"), options, &stats));
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].submit_s, 0);  // rebased to the first kept submission
  EXPECT_EQ(jobs[1].submit_s, 6831 - 120);
  EXPECT_EQ(jobs[0].gpu_model, "P100");
  EXPECT_EQ(stats.skipped["outside_window"], 1);
  options = {};
  options.max_jobs = 1;
  ASSERT_OK_AND_ASSIGN(jobs, ImportPhilly(Fixture("philly_cluster_job_log"), options, &stats));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, "application_1506638472019_10238");
  EXPECT_EQ(stats.skipped["over_max_jobs"], 2);
  EXPECT_EQ(stats.kept, 1);
}

TEST(ImportPhilly, BadFiles) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  std::string empty = Fixture("empty_file");
  EXPECT_EQ(ImportPhilly(empty, {}).status().message(), empty + ": empty file");
  std::string wrong = Fixture("wrong_layout.json");
  EXPECT_EQ(ImportPhilly(wrong, {}).status().message(),
            wrong + ": not a Philly cluster_job_log: expected a JSON array of jobs");
  std::string helios = Fixture("helios_cluster_log.csv");
  EXPECT_EQ(ImportPhilly(helios, {}).status().message(),
            helios + ": not a Philly cluster_job_log: invalid JSON");
  std::string no_attempts = dir.Write("log", R"([{"jobid":"a","submitted_time":"x"}])");
  EXPECT_EQ(ImportPhilly(no_attempts, {}).status().message(),
            no_attempts + ": not a Philly cluster_job_log: the first job has no 'attempts'");
  ImportStats stats;
  ASSERT_OK_AND_ASSIGN(auto jobs, ImportPhilly(dir.Write("none", "[]"), {}, &stats));
  EXPECT_TRUE(jobs.empty());
  EXPECT_EQ(stats.read, 0);
  EXPECT_EQ(ImportPhilly(dir / "missing", {}).status().code(), StatusCode::kIOError);
  ImportOptions bad;
  bad.window_start_s = 10;
  bad.window_end_s = 5;
  EXPECT_EQ(ImportPhilly(no_attempts, bad).status().message(),
            no_attempts + ": window_end_s must be after window_start_s");
}

TEST(ImportHelios, MapsJobsAndCountsSkips) {
  ImportStats stats;
  ASSERT_OK_AND_ASSIGN(auto jobs, ImportHelios(Fixture("helios_cluster_log.csv"), {}, &stats));
  EXPECT_EQ(stats.read, 11);
  EXPECT_EQ(stats.kept, 3);
  EXPECT_EQ(stats.skipped, (std::map<std::string, int64_t>{{"bad_time", 1},
                                                           {"malformed", 3},
                                                           {"never_ran", 2},
                                                           {"no_end_time", 1},
                                                           {"no_gpus", 1}}));
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, "11487");
  EXPECT_EQ(jobs[0].tenant, "vc6YE");
  EXPECT_EQ(jobs[0].user, "ue15b1f");
  EXPECT_EQ(jobs[0].submit_s, 0);
  EXPECT_EQ(jobs[0].duration_s, 1800);
  EXPECT_EQ(jobs[0].tasks, 1);
  EXPECT_EQ(jobs[0].gpus_per_task, 1);
  EXPECT_EQ(jobs[0].cpus_per_task, 6);
  EXPECT_EQ(jobs[1].id, "11489");  // 16 GPUs on 2 nodes: a gang of 2 x 8
  EXPECT_EQ(jobs[1].submit_s, 53);
  EXPECT_EQ(jobs[1].duration_s, 3600);
  EXPECT_EQ(jobs[1].tasks, 2);
  EXPECT_EQ(jobs[1].gpus_per_task, 8);
  EXPECT_EQ(jobs[1].cpus_per_task, 32);
  EXPECT_EQ(jobs[2].id, "11495");
  EXPECT_EQ(jobs[2].submit_s, 173);
  EXPECT_EQ(jobs[2].duration_s, 7200);
}

TEST(ImportHelios, WindowAndMaxJobs) {
  ImportOptions options;
  options.window_start_s = 50;
  options.window_end_s = 100;
  ImportStats stats;
  ASSERT_OK_AND_ASSIGN(auto jobs, ImportHelios(Fixture("helios_cluster_log.csv"), options, &stats));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, "11489");
  EXPECT_EQ(jobs[0].submit_s, 0);
  EXPECT_EQ(stats.skipped["outside_window"], 2);
  options = {};
  options.max_jobs = 2;
  ASSERT_OK_AND_ASSIGN(jobs, ImportHelios(Fixture("helios_cluster_log.csv"), options, &stats));
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(stats.skipped["over_max_jobs"], 1);
}

TEST(ImportHelios, BadFiles) {
  std::string empty = Fixture("empty_file");
  EXPECT_EQ(ImportHelios(empty, {}).status().message(), empty + ": empty file");
  std::string wrong = Fixture("wrong_layout.csv");
  EXPECT_EQ(ImportHelios(wrong, {}).status().message(),
            wrong + ": not a Helios cluster_log.csv: missing column 'job_id'");
  std::string philly = Fixture("philly_cluster_job_log");
  EXPECT_FALSE(ImportHelios(philly, {}).ok());
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  ImportStats stats;
  ASSERT_OK_AND_ASSIGN(
      auto jobs,
      ImportHelios(dir.Write("h.csv", "job_id,gpu_num,submit_time,start_time,end_time\n"), {},
                   &stats));
  EXPECT_TRUE(jobs.empty());
  EXPECT_EQ(stats.read, 0);
}

TEST(Importers, OutputWritesAndReadsBack) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  ASSERT_OK_AND_ASSIGN(auto jobs, ImportHelios(Fixture("helios_cluster_log.csv"), {}));
  ASSERT_OK(WriteTrace(dir / "h.csv", jobs));
  ASSERT_OK_AND_ASSIGN(auto back, ReadTrace(dir / "h.csv"));
  EXPECT_EQ(back, jobs);
}

// Damaged input must give a result or a clear error, never a crash (ASan checks the rest).
TEST(Importers, SurviveDamagedFiles) {
  ferry::testing::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  std::ifstream philly_in(Fixture("philly_cluster_job_log")),
      helios_in(Fixture("helios_cluster_log.csv"));
  std::stringstream philly_text, helios_text;
  philly_text << philly_in.rdbuf();
  helios_text << helios_in.rdbuf();
  std::string ferry_csv = FormatTraceCsv(SampleJobs());
  std::string ferry_json = FormatTraceJson(SampleJobs());
  uint64_t state = 12345;
  auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  const char noise[] = "\",;[]{}:0-9 \nNone.e";
  auto damage = [&](std::string text) {
    int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t pos = next() % text.size();
      switch (next() % 3) {
        case 0:
          text[pos] = noise[next() % (sizeof(noise) - 1)];
          break;
        case 1:
          text.erase(pos, 1 + next() % 8);
          break;
        default:
          text.resize(pos);
          break;
      }
    }
    return text;
  };
  for (int i = 0; i < 150; ++i) {
    std::string p = dir.Write("p" + std::to_string(i), damage(philly_text.str()));
    ImportStats stats;
    auto r = ImportPhilly(p, {}, &stats);
    if (r.ok()) {
      EXPECT_EQ(stats.kept + stats.skipped_total(), stats.read);
      for (const auto& j : *r) ASSERT_OK(ValidateJob(j));
    }
    std::string h = dir.Write("h" + std::to_string(i), damage(helios_text.str()));
    auto rh = ImportHelios(h, {}, &stats);
    if (rh.ok()) {
      EXPECT_EQ(stats.kept + stats.skipped_total(), stats.read);
      for (const auto& j : *rh) ASSERT_OK(ValidateJob(j));
    }
    auto rc = ParseTraceCsv(damage(ferry_csv), "t.csv");
    if (!rc.ok()) {
      EXPECT_EQ(rc.status().message().rfind("t.csv", 0), 0u);
    }
    auto rj = ParseTraceJson(damage(ferry_json), "t.json");
    if (!rj.ok()) {
      EXPECT_EQ(rj.status().message().rfind("t.json", 0), 0u);
    }
  }
}

// ---- Synthetic generator

SyntheticOptions ThreeTenants() {
  SyntheticOptions o;
  o.arrival_rate_per_s = 2;
  o.jobs = 20000;
  o.tenants = {{"a", 5, {"x", "y"}}, {"b", 3, {}}, {"c", 2, {"z"}}};
  o.gang_sizes = {{1, 0.7}, {2, 0.2}, {4, 0.1}};
  o.gpus_per_task = {{1, 0.5}, {8, 0.5}};
  o.duration_median_s = 600;
  o.duration_sigma = 1.5;
  o.duration_min_s = 10;
  o.duration_max_s = 1e6;
  o.priorities = {{0, 0.8}, {10, 0.2}};
  o.preemptible_fraction = 0.25;
  o.cpus_per_gpu = 4;
  o.memory_mb_per_gpu = 1000;
  o.seed = 42;
  return o;
}

TEST(Synthetic, DeterministicForASeed) {
  SyntheticOptions o = ThreeTenants();
  o.jobs = 500;
  ASSERT_OK_AND_ASSIGN(auto a, GenerateSynthetic(o));
  ASSERT_OK_AND_ASSIGN(auto b, GenerateSynthetic(o));
  ASSERT_EQ(a.size(), 500u);
  EXPECT_EQ(a, b);
  o.seed = 43;
  EXPECT_NE(*GenerateSynthetic(o), a);
  // The stream is fixed: the first arrival for seed 42 never changes across platforms.
  o.seed = 42;
  EXPECT_EQ((*GenerateSynthetic(o))[0].id, "syn-000001");
  for (const auto& j : a) ASSERT_OK(ValidateJob(j));
  for (size_t i = 1; i < a.size(); ++i) ASSERT_LT(a[i - 1].submit_s, a[i].submit_s);
}

TEST(Synthetic, StatisticsOfALargeSample) {
  SyntheticOptions o = ThreeTenants();
  ASSERT_OK_AND_ASSIGN(auto jobs, GenerateSynthetic(o));
  ASSERT_EQ(jobs.size(), 20000u);
  const double n = static_cast<double>(jobs.size());
  // Mean arrival rate: the standard error at n = 20000 is 0.7%, so 3% is a wide bound.
  EXPECT_NEAR(n / jobs.back().submit_s, 2.0, 2.0 * 0.03);
  std::map<std::string, double> tenant, gang, gpus, priority;
  double preemptible = 0;
  std::vector<double> durations;
  std::set<std::string> teams_of_a, users;
  for (const auto& j : jobs) {
    tenant[j.tenant] += 1 / n;
    gang[std::to_string(j.tasks)] += 1 / n;
    gpus[std::to_string(j.gpus_per_task)] += 1 / n;
    priority[std::to_string(j.priority)] += 1 / n;
    preemptible += j.preemptible ? 1 / n : 0;
    durations.push_back(j.duration_s);
    if (j.tenant == "a") teams_of_a.insert(j.team);
    if (j.tenant == "b") {
      EXPECT_EQ(j.team, "");
    }
    users.insert(j.user);
    EXPECT_EQ(j.cpus_per_task, 4.0 * j.gpus_per_task);
    EXPECT_EQ(j.memory_mb_per_task, 1000 * j.gpus_per_task);
    ASSERT_GE(j.duration_s, 10);
    ASSERT_LE(j.duration_s, 1e6);
  }
  EXPECT_NEAR(tenant["a"], 0.5, 0.02);
  EXPECT_NEAR(tenant["b"], 0.3, 0.02);
  EXPECT_NEAR(tenant["c"], 0.2, 0.02);
  EXPECT_NEAR(gang["1"], 0.7, 0.02);
  EXPECT_NEAR(gang["4"], 0.1, 0.02);
  EXPECT_NEAR(gpus["8"], 0.5, 0.02);
  EXPECT_NEAR(priority["10"], 0.2, 0.02);
  EXPECT_NEAR(preemptible, 0.25, 0.02);
  EXPECT_EQ(teams_of_a, (std::set<std::string>{"x", "y"}));
  EXPECT_TRUE(users.count("a-x-u0"));
  EXPECT_TRUE(users.count("b-u3"));
  EXPECT_FALSE(users.count("b-u4"));  // users_per_team = 4: u0..u3
  std::nth_element(durations.begin(), durations.begin() + durations.size() / 2, durations.end());
  EXPECT_NEAR(durations[durations.size() / 2], 600, 600 * 0.05);
}

TEST(Synthetic, ClipsDurations) {
  SyntheticOptions o;
  o.jobs = 2000;
  o.duration_median_s = 100;
  o.duration_sigma = 3;
  o.duration_min_s = 50;
  o.duration_max_s = 200;
  ASSERT_OK_AND_ASSIGN(auto jobs, GenerateSynthetic(o));
  int at_min = 0, at_max = 0;
  for (const auto& j : jobs) {
    ASSERT_GE(j.duration_s, 50);
    ASSERT_LE(j.duration_s, 200);
    at_min += j.duration_s == 50;
    at_max += j.duration_s == 200;
  }
  EXPECT_GT(at_min, 500);
  EXPECT_GT(at_max, 500);
}

TEST(Synthetic, InvalidOptionsAreRefused) {
  SyntheticOptions o;
  o.gang_sizes = {{1, 0.5}, {2, 0.4}};
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "gang_sizes: probabilities sum to 0.9, not 1");
  EXPECT_EQ(GenerateSynthetic(o).status().code(), StatusCode::kInvalid);
  o = {};
  o.arrival_rate_per_s = 0;
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "arrival_rate_per_s: must be in [1e-9, 1e9]");
  o = {};
  o.jobs = 2'000'000'000;
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "jobs: must be in [0, 10000000]");
  EXPECT_EQ(GenerateSynthetic(o).status().code(), StatusCode::kInvalid);
  o = {};
  o.tenants = {{"a", 1, {}}, {"a", 2, {}}};
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "tenants: duplicate tenant 'a'");
  o = {};
  o.gang_sizes = {{0, 1}};
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "gang_sizes: values must be >= 1");
  o = {};
  o.duration_min_s = 10;
  o.duration_max_s = 5;
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "duration: need 0 <= min_s <= max_s");
  o = {};
  o.preemptible_fraction = 1.5;
  EXPECT_EQ(ValidateSyntheticOptions(o).message(), "preemptible_fraction: must be in [0, 1]");
}

TEST(SyntheticConfig, ParsesAllKeys) {
  const char* yaml = R"(
arrival_rate_per_s: 0.5
jobs: 300
seed: 7
users_per_team: 2
tenants:
  - {name: vision, weight: 3, teams: [det, seg]}
  - name: nlp
    weight: 1
gang_sizes: [{size: 1, probability: 0.75}, {size: 4, probability: 0.25}]
gpus_per_task: [{gpus: 8, probability: 1}]
duration: {median_s: 1800, sigma: 0.5, min_s: 60, max_s: 86400}
priorities: [{priority: 0, probability: 0.9}, {priority: 100, probability: 0.1}]
preemptible_fraction: 0.3
gpu_model: H100
cpus_per_gpu: 8
memory_mb_per_gpu: 32000
)";
  ASSERT_OK_AND_ASSIGN(auto o, ParseSyntheticOptions(yaml));
  EXPECT_EQ(o.arrival_rate_per_s, 0.5);
  EXPECT_EQ(o.jobs, 300);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.users_per_team, 2);
  ASSERT_EQ(o.tenants.size(), 2u);
  EXPECT_EQ(o.tenants[0].name, "vision");
  EXPECT_EQ(o.tenants[0].weight, 3);
  EXPECT_EQ(o.tenants[0].teams, (std::vector<std::string>{"det", "seg"}));
  EXPECT_TRUE(o.tenants[1].teams.empty());
  ASSERT_EQ(o.gang_sizes.size(), 2u);
  EXPECT_EQ(o.gang_sizes[1].value, 4);
  EXPECT_EQ(o.gang_sizes[1].probability, 0.25);
  EXPECT_EQ(o.gpus_per_task[0].value, 8);
  EXPECT_EQ(o.duration_median_s, 1800);
  EXPECT_EQ(o.duration_sigma, 0.5);
  EXPECT_EQ(o.duration_min_s, 60);
  EXPECT_EQ(o.duration_max_s, 86400);
  EXPECT_EQ(o.priorities[1].value, 100);
  EXPECT_EQ(o.preemptible_fraction, 0.3);
  EXPECT_EQ(o.gpu_model, "H100");
  EXPECT_EQ(o.cpus_per_gpu, 8);
  EXPECT_EQ(o.memory_mb_per_gpu, 32000);
  ASSERT_OK_AND_ASSIGN(auto jobs, GenerateSynthetic(o));
  ASSERT_EQ(jobs.size(), 300u);
  EXPECT_EQ(jobs[0].gpu_model, "H100");
  EXPECT_EQ(jobs[0].gpus_per_task, 8);
  // An empty config gives the defaults.
  ASSERT_OK_AND_ASSIGN(auto defaults, ParseSyntheticOptions(""));
  EXPECT_EQ(defaults.jobs, SyntheticOptions{}.jobs);
}

TEST(SyntheticConfig, Errors) {
  auto err = [](const char* yaml) {
    auto r = ParseSyntheticOptions(yaml);
    EXPECT_FALSE(r.ok());
    return r.status().message();
  };
  EXPECT_EQ(err("jobs: 3\ncolour: red\n"), "2:1: colour: unknown key");
  EXPECT_EQ(err("jobs: many\n"), "1:7: jobs: expected an integer, got 'many'");
  EXPECT_EQ(err("arrival_rate_per_s: [1]\n"), "1:21: arrival_rate_per_s: expected a number");
  EXPECT_EQ(err("tenants:\n  - weight: 2\n"), "2:5: tenants[0].name: missing");
  EXPECT_EQ(err("tenants:\n  - {name: a, size: 2}\n"), "2:15: tenants[0].size: unknown key");
  EXPECT_EQ(err("gang_sizes: [{size: 1, probability: 0.5}]\n"),
            "1:1: gang_sizes: probabilities sum to 0.5, not 1");
  EXPECT_EQ(err("duration: {median_s: 0}\n"), "1:1: duration.median_s: must be > 0");
  EXPECT_EQ(err("- 1\n- 2\n"), "1:1: config: expected a map of options");
  EXPECT_EQ(err(std::string(2 << 20, ' ').c_str()), "the config is larger than 1 MiB");
  std::string deep = "jobs: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  EXPECT_FALSE(ParseSyntheticOptions(deep).ok());
  std::string syntax = err("jobs: [1, 2\n");
  EXPECT_NE(syntax.find(": "), std::string::npos) << syntax;
}

TEST(SyntheticConfig, ErrorsNameTheFileLineAndColumn) {
  auto err = [](const std::string& yaml) {
    auto r = ParseSyntheticOptions(yaml, "gen.yaml");
    EXPECT_FALSE(r.ok()) << yaml;
    return r.status().message();
  };
  EXPECT_EQ(err("jobs: 3\nseed: x1\n"), "gen.yaml:2:7: seed: expected an integer, got 'x1'");
  EXPECT_EQ(err("tenants:\n  - name: a\n    weight: heavy\n"),
            "gen.yaml:3:13: tenants[0].weight: expected a number, got 'heavy'");
  EXPECT_EQ(err("duration:\n  median_s: .inf\n"),
            "gen.yaml:2:13: duration.median_s: must be finite");
  EXPECT_EQ(err("jobs: 3\njobs: 4\n"), "gen.yaml:2:1: jobs: duplicate key");
  EXPECT_EQ(err("jobs: \"3\"\n"), "gen.yaml:1:7: jobs: expected an integer, got '3'");
  EXPECT_EQ(err("gpu_model:\n"), "gen.yaml:1:1: gpu_model: expected a string");
  EXPECT_EQ(err("gang_sizes: [{size: 1, probability: 0.5}]\n"),
            "gen.yaml:1:1: gang_sizes: probabilities sum to 0.5, not 1");
  EXPECT_EQ(err(std::string(2 << 20, ' ')), "gen.yaml: the config is larger than 1 MiB");
  EXPECT_EQ(err("jobs: [1, 2\n").rfind("gen.yaml:", 0), 0u);
}

TEST(Synthetic, RuntimeLimitsRoundUpLikeUsers) {
  SyntheticOptions o;
  o.jobs = 2000;
  o.duration_median_s = 3 * 3600;
  o.duration_sigma = 1.5;
  o.duration_min_s = 60;
  o.duration_max_s = 10 * 86400;
  ASSERT_OK_AND_ASSIGN(auto plain, GenerateSynthetic(o));
  o.runtime_limit_factor = 1.5;
  o.runtime_limit_steps_s = SlurmRuntimeLimitSteps();
  ASSERT_OK_AND_ASSIGN(auto limited, GenerateSynthetic(o));
  ASSERT_EQ(plain.size(), limited.size());
  const std::vector<double> steps = SlurmRuntimeLimitSteps();
  int over_all_steps = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    // Everything but the limit is the same trace.
    TraceJob same = limited[i];
    same.max_runtime_s = 0;
    ASSERT_EQ(same, plain[i]);
    const double want = 1.5 * plain[i].duration_s;
    const double limit = limited[i].max_runtime_s;
    ASSERT_GE(limit, want);
    ASSERT_OK(ValidateJob(limited[i]));
    if (want > steps.back()) {
      EXPECT_EQ(limit, want);  // past 7 days: the product itself
      ++over_all_steps;
      continue;
    }
    // The smallest step at or above factor × duration.
    auto it = std::lower_bound(steps.begin(), steps.end(), want);
    ASSERT_NE(it, steps.end());
    EXPECT_EQ(limit, *it);
  }
  EXPECT_GT(over_all_steps, 0);
  // Without steps: factor × duration exactly.
  o.runtime_limit_steps_s.clear();
  o.runtime_limit_factor = 2;
  ASSERT_OK_AND_ASSIGN(auto doubled, GenerateSynthetic(o));
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(doubled[i].max_runtime_s, 2 * plain[i].duration_s);
  }
}

TEST(Synthetic, RuntimeLimitOptionsAreChecked) {
  SyntheticOptions o;
  o.runtime_limit_factor = 0.5;
  EXPECT_EQ(ValidateSyntheticOptions(o).message(),
            "runtime_limit.factor: must be 0 (no limits) or in [1, 1e6]");
  o.runtime_limit_factor = 1;
  o.runtime_limit_steps_s = {3600, -1};
  EXPECT_EQ(ValidateSyntheticOptions(o).message(),
            "runtime_limit.round_up_to: steps must be > 0 seconds");
  o.runtime_limit_factor = 0;
  o.runtime_limit_steps_s = {3600};
  EXPECT_EQ(ValidateSyntheticOptions(o).message(),
            "runtime_limit.round_up_to: needs a factor (>= 1)");
  EXPECT_EQ(GenerateSynthetic(o).status().code(), StatusCode::kInvalid);

  ASSERT_OK_AND_ASSIGN(auto slurm,
                       ParseSyntheticOptions("runtime_limit: {factor: 2, round_up_to: slurm}\n"));
  EXPECT_EQ(slurm.runtime_limit_factor, 2);
  EXPECT_EQ(slurm.runtime_limit_steps_s, SlurmRuntimeLimitSteps());
  ASSERT_OK_AND_ASSIGN(auto listed, ParseSyntheticOptions("runtime_limit:\n  factor: 1.2\n"
                                                          "  round_up_to: [1800, 7200]\n"));
  EXPECT_EQ(listed.runtime_limit_steps_s, (std::vector<double>{1800, 7200}));
  ASSERT_OK_AND_ASSIGN(auto none, ParseSyntheticOptions("jobs: 5\n"));
  EXPECT_EQ(none.runtime_limit_factor, 0);
  ASSERT_OK_AND_ASSIGN(auto jobs, GenerateSynthetic(none));
  for (const auto& j : jobs) EXPECT_EQ(j.max_runtime_s, 0);

  auto err = [](const char* yaml) { return ParseSyntheticOptions(yaml).status().message(); };
  EXPECT_EQ(err("runtime_limit: 2\n"), "1:16: runtime_limit: expected a map");
  EXPECT_EQ(err("runtime_limit: {factor: 2, round: slurm}\n"),
            "1:28: runtime_limit.round: unknown key");
  EXPECT_EQ(err("runtime_limit: {factor: 2, round_up_to: weekly}\n"),
            "1:41: runtime_limit.round_up_to: expected 'slurm' or a list of seconds");
  EXPECT_EQ(err("runtime_limit: {factor: 2, round_up_to: [1h]}\n"),
            "1:42: runtime_limit.round_up_to[0]: expected a number of seconds, got '1h'");
  EXPECT_EQ(err("runtime_limit: {factor: 0.5}\n"),
            "1:1: runtime_limit.factor: must be 0 (no limits) or in [1, 1e6]");
}

TEST(Synthetic, DataSetsAreDrawnFromTheirOwnStream) {
  SyntheticOptions o;
  o.jobs = 4000;
  ASSERT_OK_AND_ASSIGN(auto plain, GenerateSynthetic(o));
  o.datasets = {{"imagenet", 0.75}, {"c4", 0.25}};
  ASSERT_OK_AND_ASSIGN(auto with_data, GenerateSynthetic(o));
  ASSERT_EQ(plain.size(), with_data.size());
  int imagenet = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(with_data[i].datasets.size(), 1u);
    imagenet += with_data[i].datasets[0] == "imagenet";
    TraceJob same = with_data[i];
    same.datasets.clear();
    ASSERT_EQ(same, plain[i]);  // everything else is the same trace
  }
  EXPECT_NEAR(imagenet / 4000.0, 0.75, 0.03);

  ASSERT_OK_AND_ASSIGN(auto parsed,
                       ParseSyntheticOptions("datasets:\n  - {name: imagenet, probability: 0.75}\n"
                                             "  - {name: c4, probability: 0.25}\n"));
  ASSERT_EQ(parsed.datasets.size(), 2u);
  EXPECT_EQ(parsed.datasets[1].name, "c4");
  EXPECT_EQ(parsed.datasets[1].probability, 0.25);

  auto err = [](const char* yaml) { return ParseSyntheticOptions(yaml).status().message(); };
  EXPECT_EQ(err("datasets: imagenet\n"), "1:11: datasets: expected a list");
  EXPECT_EQ(err("datasets: [{name: a}]\n"), "1:12: datasets[0].probability: missing");
  EXPECT_EQ(err("datasets: [{name: a, probability: 0.5}]\n"),
            "1:1: datasets: probabilities must sum to 1");
  EXPECT_EQ(err("datasets: [{name: 'a;b', probability: 1}]\n"),
            "1:1: datasets: datasets: dataset name 'a;b' contains ';'");
}

// The staging scenario (testdata/staging, docs/fleet-sim.md): every tenant's
// jobs read one of the tenant's data sets, and the jobs are those of the
// contended example otherwise (same seeds and distributions).
TEST(SyntheticConfig, StagingScenarioGivesEveryJobADataSet) {
  const std::map<std::string, std::set<std::string>> expected = {
      {"llm", {"pretrain-tokens", "sft-mix"}},
      {"vision", {"imagenet-1k", "coco", "openimages"}},
      {"research", {"d4rl", "atari-replay", "toy-suite"}},
      {"eval", {"eval-suite", "mmlu"}}};
  for (const auto& [tenant, datasets] : expected) {
    SCOPED_TRACE(tenant);
    std::ifstream in(Fixture("staging/tenant-" + tenant + ".yaml"));
    std::stringstream text;
    text << in.rdbuf();
    ASSERT_OK_AND_ASSIGN(SyntheticOptions options, ParseSyntheticOptions(text.str()));
    ASSERT_OK_AND_ASSIGN(auto jobs, GenerateSynthetic(options));
    ASSERT_FALSE(jobs.empty());
    std::set<std::string> seen;
    for (const TraceJob& job : jobs) {
      ASSERT_EQ(job.datasets.size(), 1u);
      seen.insert(job.datasets[0]);
    }
    EXPECT_EQ(seen, datasets);
  }
}

}  // namespace
}  // namespace ferry::fleet::sim
