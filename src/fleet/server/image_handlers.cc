// Image resolution at submission (docs/fleet-images.md): a job's `image` is
// looked up in its registry and the manifest digest stored with the job.
#include "fleet/server/fleet_server.h"

namespace ferry::fleet::server_internal {

bool FleetServer::ResolveImage(Call& c, JobSpec* spec) {
  if (spec->image.empty()) return true;
  Result<ImageRef> image = ParseImageRef(spec->image);
  if (!image.ok()) {  // ParseJobSpec checked it already
    SendValidation(c, {{"image", image.status().message()}});
    return false;
  }
  const ImageResolution resolved = images_->Resolve(*image);
  switch (resolved.outcome) {
    case ImageResolution::Outcome::kResolved:
      spec->image_digest = resolved.digest;
      return true;
    case ImageResolution::Outcome::kNotFound:
    case ImageResolution::Outcome::kDenied:
      SendValidation(c, {{"image", resolved.message}});
      return false;
    case ImageResolution::Outcome::kUnreachable:
      c.res.set_header("Retry-After", "30");
      SendProblem(c, 503, "registry-unavailable",
                  "image " + spec->image + ": " + resolved.message + "; submit again later");
      return false;
  }
  return false;
}

void FleetServer::UseRegistries(RegistryConfig config) {
  images_ = std::make_unique<ImageResolver>(std::move(config));
}

}  // namespace ferry::fleet::server_internal
