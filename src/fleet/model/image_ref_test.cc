#include "ferry/fleet/image_ref.h"

#include <gtest/gtest.h>

#include <string>

#include "ferry/fleet/model_json.h"

namespace ferry::fleet {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

TEST(ImageRefTest, SplitsRegistryRepositoryTagAndDigest) {
  Result<ImageRef> ref = ParseImageRef("registry.example.com/team/trainer:1.4");
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  EXPECT_EQ(ref->registry, "registry.example.com");
  EXPECT_EQ(ref->repository, "team/trainer");
  EXPECT_EQ(ref->tag, "1.4");
  EXPECT_EQ(ref->digest, "");
  EXPECT_EQ(ref->reference(), "1.4");
  EXPECT_EQ(ref->Pinned(kDigest), "registry.example.com/team/trainer@" + kDigest);
  EXPECT_FALSE(ref->IsLoopback());

  ref = ParseImageRef("localhost:5000/ferry-test@" + kDigest);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  EXPECT_EQ(ref->registry, "localhost:5000");
  EXPECT_EQ(ref->tag, "");
  EXPECT_EQ(ref->reference(), kDigest);
  EXPECT_TRUE(ref->IsLoopback());

  ref = ParseImageRef("127.0.0.1:5000/a/b_c/d__e/f-g:tag_1@" + kDigest);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  EXPECT_EQ(ref->repository, "a/b_c/d__e/f-g");
  EXPECT_EQ(ref->tag, "tag_1");
  EXPECT_TRUE(ref->IsLoopback());

  ref = ParseImageRef("[::1]:5000/app");
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  EXPECT_EQ(ref->tag, "latest");
  EXPECT_TRUE(ref->IsLoopback());
}

TEST(ImageRefTest, RefusesWhatIsNotAReference) {
  for (const std::string& bad :
       {std::string(""),
        std::string("ubuntu"),
        std::string("ubuntu:22.04"),
        std::string("library/ubuntu"),
        std::string("registry.example.com"),
        std::string("registry.example.com/"),
        std::string("registry.example.com/Team/app"),
        std::string("registry.example.com/app:"),
        std::string("registry.example.com/app:-x"),
        std::string("registry.example.com/app:" + std::string(129, 'a')),
        std::string("registry.example.com/a..b"),
        std::string("registry.example.com/a//b"),
        std::string("registry.example.com/app@sha256:abc"),
        std::string("registry.example.com/app@md5:" + std::string(32, 'a')),
        std::string("registry.example.com/app @" + kDigest),
        std::string("-bad.example.com/app"),
        std::string("localhost:0/app"),
        std::string("localhost:99999/app"),
        std::string("host.example.com:/app"),
        std::string("registry.example.com/app\n"),
        std::string("r.example.com/") + std::string(600, 'a')}) {
    EXPECT_FALSE(ParseImageRef(bad).ok()) << bad;
  }
  EXPECT_NE(ParseImageRef("ubuntu:22.04").status().message().find("must name its registry"),
            std::string::npos);
}

TEST(ImageRefTest, JobSpecImageFields) {
  std::vector<FieldError> errors;
  Result<JobSpec> spec = ParseJobSpec(
      nlohmann::json{{"name", "a"}, {"command", {"true"}}, {"image", "localhost:5000/x:1"}},
      &errors);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->image, "localhost:5000/x:1");
  spec->image_digest = kDigest;
  const nlohmann::json round = ToJson(*spec);
  EXPECT_EQ(round["image"], "localhost:5000/x:1");
  EXPECT_EQ(round["image_digest"], kDigest);
  Result<JobSpec> again = ParseJobSpec(round, &errors);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->image_digest, kDigest);
  EXPECT_FALSE(ToJson(JobSpec{}).contains("image"));

  spec = ParseJobSpec(nlohmann::json{{"name", "a"}, {"command", {"true"}}, {"image", "ubuntu"}},
                      &errors);
  ASSERT_FALSE(spec.ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "image");
  EXPECT_NE(errors[0].detail.find("must name its registry"), std::string::npos);

  for (const nlohmann::json& bad :
       {nlohmann::json(42), nlohmann::json(""), nlohmann::json::array()}) {
    spec =
        ParseJobSpec(nlohmann::json{{"name", "a"}, {"command", {"true"}}, {"image", bad}}, &errors);
    ASSERT_FALSE(spec.ok()) << bad.dump();
    EXPECT_EQ(errors.at(0).field, "image");
  }
  spec = ParseJobSpec(nlohmann::json{{"name", "a"},
                                     {"command", {"true"}},
                                     {"image", "localhost:5000/x:1"},
                                     {"image_digest", "sha256:XYZ"}},
                      &errors);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(errors.at(0).field, "image_digest");
  spec = ParseJobSpec(
      nlohmann::json{{"name", "a"}, {"command", {"true"}}, {"image_digest", kDigest}}, &errors);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(errors.at(0).field, "image_digest");
}

}  // namespace
}  // namespace ferry::fleet
