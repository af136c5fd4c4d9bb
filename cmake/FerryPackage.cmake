# `make package`: a Debian package (CPack) of everything `cmake --install`
# puts under /usr, plus systemd units for `ferry server` and `ferry agent`,
# their settings in /etc/ferry (conffiles) and the maintainer scripts that
# create the `ferry` service account (deploy/). The units and settings are
# component "deb", left out of a plain `cmake --install`.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/ferry-server.service
              ${PROJECT_SOURCE_DIR}/deploy/systemd/ferry-agent.service
        DESTINATION /lib/systemd/system COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/config/server.env
              ${PROJECT_SOURCE_DIR}/deploy/config/agent.env
        DESTINATION /etc/ferry PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ
        COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/docs/fleet.md ${PROJECT_SOURCE_DIR}/docs/fleet-server.md
              ${PROJECT_SOURCE_DIR}/docs/fleet-agent.md ${PROJECT_SOURCE_DIR}/docs/fleet-metrics.md
              ${PROJECT_SOURCE_DIR}/docs/fleet-dashboard.md
              ${PROJECT_SOURCE_DIR}/docs/install.md
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/ferry COMPONENT deb EXCLUDE_FROM_ALL)
# Prometheus rules for the control plane (docs/fleet-metrics.md).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/prometheus/ferry-rules.yml
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/ferry/prometheus COMPONENT deb EXCLUDE_FROM_ALL)

set(CPACK_PACKAGE_NAME ferry)
set(CPACK_PACKAGE_VENDOR "Ferry")
set(CPACK_PACKAGE_CONTACT "Ferry developers <ferry@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Zero-copy Arrow data exchange, dataflows and a GPU job platform")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_FILE_NAME ferry_${PROJECT_VERSION}_amd64)
# One package holding the default component and "deb".
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified deb)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, python3")
# The dashboard's charts (docs/fleet-dashboard.md); its pages work without it.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libjs-chart.js")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
