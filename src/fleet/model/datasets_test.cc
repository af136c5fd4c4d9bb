// Job inputs in the spec, dataset manifests (validation and the canonical
// digest) and the staged inputs of an assignment.
#include <gtest/gtest.h>

#include "ferry/base/hash.h"
#include "ferry/fleet/model.h"
#include "ferry/fleet/model_json.h"

namespace ferry::fleet {
namespace {

using nlohmann::json;

const std::string kHexA(64, 'a');
const std::string kHexB(64, 'b');

json Job(json inputs) {
  return {{"name", "train"}, {"command", {"python", "train.py"}}, {"inputs", std::move(inputs)}};
}

// The field errors of a spec that must be refused.
std::vector<FieldError> Refused(const json& body) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(body, &errors);
  EXPECT_FALSE(spec.ok()) << body.dump();
  return errors;
}

std::string DetailOf(const std::vector<FieldError>& errors, const std::string& field) {
  for (const FieldError& error : errors) {
    if (error.field == field) return error.detail;
  }
  return "(no error for " + field + ")";
}

TEST(JobInputs, DatasetAndUriInputsParse) {
  std::vector<FieldError> errors;
  auto spec = ParseJobSpec(Job(json::parse(R"([
      {"name": "train", "dataset": "imagenet"},
      {"name": "vocab", "uri": "s3://lake/v/vocab.txt", "sha256": ")" +
                                           kHexA + R"(", "size": 12}])")),
                           &errors);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->inputs.size(), 2u);
  EXPECT_EQ(spec->inputs[0].dataset, "imagenet");
  EXPECT_EQ(spec->inputs[0].version, 0);  // the latest, resolved at submission
  EXPECT_EQ(spec->inputs[0].mode, "copy");
  EXPECT_EQ(spec->inputs[1].uri, "s3://lake/v/vocab.txt");
  EXPECT_EQ(spec->inputs[1].size, 12);
  EXPECT_EQ(spec->inputs[1].sha256, kHexA);
  // What the store keeps parses back to the same spec.
  auto again = ParseJobSpec(ToJson(*spec), &errors);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ToJson(*again), ToJson(*spec));
}

TEST(JobInputs, StreamModeIsRefusedWithAClearMessage) {
  auto errors = Refused(Job({{{"name", "train"}, {"dataset", "imagenet"}, {"mode", "stream"}}}));
  EXPECT_EQ(DetailOf(errors, "inputs[0].mode"), "mode \"stream\" is not implemented; use \"copy\"");
  errors = Refused(Job({{{"name", "train"}, {"dataset", "imagenet"}, {"mode", "lazy"}}}));
  EXPECT_EQ(DetailOf(errors, "inputs[0].mode"), "must be \"copy\"");
}

TEST(JobInputs, EveryBadInputIsNamed) {
  const json inputs = json::parse(R"([
      {"name": "a/b", "dataset": "d"},
      {"name": "ok1"},
      {"name": "ok2", "dataset": "d", "uri": "https://h/x"},
      {"name": "ok3", "uri": "https://h/x"},
      {"name": "ok4", "uri": "ftp://h/x", "sha256": "ABC"},
      {"name": "ok5", "dataset": "d", "sha256": ")" +
                                  kHexA + R"("},
      {"name": "ok5", "dataset": "d"},
      {"name": "ok6", "dataset": "d", "version": -1},
      {"name": "ok7", "dataset": "d", "colour": "red"},
      "train",
      {"dataset": "d"},
      {"name": "ok8", "uri": "https://h/dir/", "sha256": ")" +
                                  kHexA + R"("}])");
  auto errors = Refused(Job(inputs));
  EXPECT_NE(DetailOf(errors, "inputs[0].name").find("letters, digits"), std::string::npos);
  EXPECT_NE(DetailOf(errors, "inputs[1].dataset").find("exactly one"), std::string::npos);
  EXPECT_NE(DetailOf(errors, "inputs[2].uri").find("exactly one"), std::string::npos);
  EXPECT_EQ(DetailOf(errors, "inputs[3].sha256"), "is required with uri");
  EXPECT_NE(DetailOf(errors, "inputs[4].uri").find("s3://"), std::string::npos);
  EXPECT_EQ(DetailOf(errors, "inputs[4].sha256"), "must be 64 lower-case hex digits");
  EXPECT_NE(DetailOf(errors, "inputs[5].sha256").find("uri inputs"), std::string::npos);
  EXPECT_NE(DetailOf(errors, "inputs[6].name").find("duplicate"), std::string::npos);
  EXPECT_NE(DetailOf(errors, "inputs[7].version").find("between 0"), std::string::npos);
  EXPECT_EQ(DetailOf(errors, "inputs[8].colour"), "unknown field");
  EXPECT_EQ(DetailOf(errors, "inputs[9]"), "must be an object");
  EXPECT_EQ(DetailOf(errors, "inputs[10].name"), "is required");
  EXPECT_NE(DetailOf(errors, "inputs[11].uri").find("one object"), std::string::npos);

  EXPECT_EQ(DetailOf(Refused(Job("train")), "inputs"), "must be an array of objects");
  json many = json::array();
  for (int i = 0; i < 65; ++i) {
    many.push_back({{"name", "in" + std::to_string(i)}, {"dataset", "d"}});
  }
  EXPECT_EQ(DetailOf(Refused(Job(many)), "inputs"), "must have at most 64 items");
}

TEST(ManifestChecks, PathsSourcesAndUris) {
  EXPECT_EQ(CheckObjectPath("a/b.bin"), "");
  EXPECT_EQ(CheckObjectPath("dir with space/\xc3\xa9.txt"), "");
  for (const char* bad :
       {"", "/abs", "a//b", "a/./b", "../up", "a/..", "a/", ".", "a\tb", "new\nline"}) {
    EXPECT_NE(CheckObjectPath(bad), "") << bad;
  }
  EXPECT_NE(CheckObjectPath(std::string(1025, 'x')), "");
  EXPECT_EQ(CheckObjectPath(std::string(1024, 'x')), "");

  for (const char* good : {"s3://lake/imagenet/", "s3://lake/", "https://h/base/",
                           "http://h:8080/a/b/", "file:///data/sets/"}) {
    EXPECT_EQ(CheckDatasetSource(good), "") << good;
  }
  for (const char* bad : {"s3://lake/imagenet", "s3:///prefix/", "s3://", "https:///x/",
                          "ftp://h/x/", "file://relative/", "file:///", "https://h/a/../b/",
                          "https://h/a?x=1/", "https://h/a b/", "lake/imagenet/"}) {
    EXPECT_NE(CheckDatasetSource(bad), "") << bad;
  }
  EXPECT_EQ(CheckObjectUri("https://h/vocab.txt"), "");
  EXPECT_EQ(CheckObjectUri("file:///data/x.bin"), "");
  EXPECT_NE(CheckObjectUri("https://h/"), "");
  EXPECT_NE(CheckObjectUri("https://h"), "");
  EXPECT_NE(CheckObjectUri("s3://bucket"), "");

  EXPECT_EQ(CheckSha256(kHexA), "");
  EXPECT_NE(CheckSha256(std::string(64, 'A')), "");
  EXPECT_NE(CheckSha256(std::string(63, 'a')), "");
  EXPECT_NE(CheckInputName("..", 64), "");
  EXPECT_NE(CheckInputName(std::string(65, 'a'), 64), "");
  EXPECT_EQ(CheckInputName(std::string(128, 'a'), 128), "");
}

TEST(ManifestDigest, IsTheDocumentedCanonicalForm) {
  const std::vector<DatasetObject> objects = {{"a.bin", 10, kHexA}, {"b/c.bin", 0, kHexB}};
  const std::string expected = "sha256:" + Sha256Hex(
                                               "ferry-manifest-v1\ns3://lake/x/\n"
                                               "a.bin\t10\t" +
                                               kHexA + "\nb/c.bin\t0\t" + kHexB + "\n");
  EXPECT_EQ(ManifestDigest("s3://lake/x/", objects), expected);
  EXPECT_NE(ManifestDigest("s3://lake/y/", objects), expected);  // the source is part of it
}

json Registration(json objects) {
  return {{"name", "imagenet"}, {"source", "s3://lake/imagenet/"}, {"objects", std::move(objects)}};
}

TEST(DatasetRegistration, SortsSumsAndDigests) {
  std::vector<FieldError> errors;
  auto version = ParseDatasetRegistration(
      Registration({{{"path", "z.bin"}, {"size", 5}, {"sha256", kHexB}},
                    {{"path", "a/b.bin"}, {"size", 10}, {"sha256", kHexA}}}),
      &errors);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  ASSERT_EQ(version->objects.size(), 2u);
  EXPECT_EQ(version->objects[0].path, "a/b.bin");
  EXPECT_EQ(version->bytes, 15);
  EXPECT_EQ(version->object_count, 2);
  EXPECT_EQ(version->digest, ManifestDigest("s3://lake/imagenet/", version->objects));
  // The order of the request does not change the digest.
  auto reordered =
      ParseDatasetRegistration(Registration({{{"path", "a/b.bin"}, {"size", 10}, {"sha256", kHexA}},
                                             {{"path", "z.bin"}, {"size", 5}, {"sha256", kHexB}}}),
                               &errors);
  ASSERT_TRUE(reordered.ok());
  EXPECT_EQ(reordered->digest, version->digest);
}

TEST(DatasetRegistration, RefusesBadManifests) {
  auto refused = [](const json& body) {
    std::vector<FieldError> errors;
    EXPECT_FALSE(ParseDatasetRegistration(body, &errors).ok()) << body.dump();
    return errors;
  };
  auto errors = refused(Registration(
      {{{"path", "/abs"}, {"size", -1}, {"sha256", "x"}}, {{"path", "ok"}, {"size", 1}}}));
  EXPECT_NE(DetailOf(errors, "objects[0].path").find("relative"), std::string::npos);
  EXPECT_NE(DetailOf(errors, "objects[0].size").find("between 0"), std::string::npos);
  EXPECT_EQ(DetailOf(errors, "objects[0].sha256"), "must be 64 lower-case hex digits");
  EXPECT_EQ(DetailOf(errors, "objects[1].sha256"), "is required");

  errors = refused(Registration({{{"path", "a"}, {"size", 1}, {"sha256", kHexA}},
                                 {{"path", "a"}, {"size", 2}, {"sha256", kHexB}}}));
  EXPECT_EQ(DetailOf(errors, "objects"), "duplicate path \"a\"");
  EXPECT_EQ(DetailOf(refused(Registration(json::array())), "objects"),
            "must have between 1 and 100000 items");
  json bad_source = Registration({{{"path", "a"}, {"size", 1}, {"sha256", kHexA}}});
  bad_source["source"] = "s3://lake/no-slash";
  EXPECT_NE(DetailOf(refused(bad_source), "source").find("end in '/'"), std::string::npos);
  json unknown = bad_source;
  unknown["source"] = "s3://lake/";
  unknown["owner"] = "me";
  EXPECT_EQ(DetailOf(refused(unknown), "owner"), "unknown field");
  EXPECT_EQ(DetailOf(refused({{"source", "s3://lake/"}, {"objects", {}}}), "name"), "is required");
  EXPECT_FALSE(ParseDatasetRegistration(json::array(), nullptr).ok());

  // Many broken objects: the first ones are listed, the rest counted.
  json many = json::array();
  for (int i = 0; i < 200; ++i) many.push_back({{"path", "/" + std::to_string(i)}});
  errors = refused(Registration(many));
  EXPECT_LE(errors.size(), kMaxObjectErrors + 1);
  EXPECT_NE(errors.back().detail.find("more errors"), std::string::npos);
}

TEST(StagedInputs, RoundTripAndStrictParsing) {
  TaskAssignment assignment;
  assignment.tenant = "acme";
  assignment.inputs = {
      {"train", {{"a/b.bin", "s3://lake/imagenet/a/b.bin", 10, kHexA}}},
      {"vocab", {{"vocab.txt", "https://h/vocab.txt", -1, kHexB}}},
  };
  const json wire = ToJson(assignment);
  EXPECT_EQ(wire["tenant"], "acme");
  EXPECT_EQ(wire["inputs"][0], json::parse(R"({"name": "train", "objects": [{"path": "a/b.bin",
      "uri": "s3://lake/imagenet/a/b.bin", "size": 10, "sha256": ")" +
                                           kHexA + R"("}]})"));
  auto parsed = ParseStagedInputs(wire["inputs"]);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].name, "train");
  EXPECT_EQ((*parsed)[0].objects[0].uri, "s3://lake/imagenet/a/b.bin");
  EXPECT_EQ((*parsed)[1].objects[0].size, -1);
  EXPECT_EQ(ToJson((*parsed)[1]), wire["inputs"][1]);

  json bad = wire["inputs"];
  bad[0]["objects"][0]["path"] = "../escape";
  auto escaped = ParseStagedInputs(bad);
  ASSERT_FALSE(escaped.ok());
  EXPECT_NE(escaped.status().message().find("inputs[0].objects[0].path"), std::string::npos)
      << escaped.status().message();
  bad = wire["inputs"];
  bad[1]["objects"] = json::array();
  EXPECT_FALSE(ParseStagedInputs(bad).ok());
  bad = wire["inputs"];
  bad[1]["name"] = "train";
  EXPECT_FALSE(ParseStagedInputs(bad).ok());
  EXPECT_FALSE(ParseStagedInputs(json::object()).ok());
  ASSERT_TRUE(ParseStagedInputs(json::array()).ok());
}

}  // namespace
}  // namespace ferry::fleet
