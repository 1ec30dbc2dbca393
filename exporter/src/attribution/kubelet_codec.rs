//! The kubelet's PodResources answer (`List`, `Get`) read under the caps while it is
//! decoded (docs/adr/0004-kubelet-answer-decoded-under-caps.md).
//!
//! tonic hands the decoder the whole message (at most [`super::kubelet::MAX_ANSWER`] bytes);
//! the decoder walks its protobuf fields over that buffer with prost's own primitives and
//! keeps only what [`Allocations`] holds: each GPU's holders, within the caps of
//! `crate::bounds`. Nothing is built for an entry that is not kept, so the memory is that
//! of the answer's bytes plus the caps, whatever the answer holds: an empty container costs
//! 2 bytes on the wire and nothing more here (decoded into the generated structs, it costs
//! over 100 bytes and its vector's growth). Fields are read as prost reads them (the last
//! of a repeated singular field wins, unknown fields are skipped, a string that is not
//! UTF-8 or a field of the wrong wire type is an error), and the holders are added in the
//! order `Allocations::from_response` adds them: the same answer gives the same
//! allocations, caps included.

use super::allocations::{Allocations, Builder, dra_device, is_gpu_driver, parse_device_id};
use crate::bounds::fits;
use prost::bytes::Buf as _;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use std::marker::PhantomData;
use truthscale_core::model::{Holder, PodRef};

/// Why an answer does not decode.
pub(crate) type DecodeError = String;

/// The fields of `ListPodResourcesResponse` and `GetPodResourcesResponse`: both hold their
/// pods (a list of them; one) in field 1.
const ANSWER_PODS: u32 = 1;
/// `PodResources`: name, namespace, containers.
const POD: [u32; 3] = [1, 2, 3];
/// `ContainerResources`: name, devices, dynamic resources (cpu ids and memory unread).
const CONTAINER: [u32; 3] = [1, 2, 5];
/// `ContainerDevices`: resource name, device ids (the topology unread).
const DEVICES: [u32; 2] = [1, 2];
/// `DynamicResource`: its claim resources (the claim's name and namespace unread).
const DYNAMIC: [u32; 1] = [4];
/// `ClaimResource`: CDI devices, driver name, device name (the pool unread).
const CLAIM: [u32; 3] = [1, 2, 4];
/// `CDIDevice`: name.
const CDI: [u32; 1] = [1];

/// The GPU allocations of a `List` or `Get` answer's protobuf bytes, for the resource
/// names `patterns`, under the caps of [`Allocations`] (what they leave out is counted).
///
/// # Errors
/// The bytes are not such an answer: truncated, a length past the end, a bad key or wire
/// type, a string read that is not UTF-8.
pub(crate) fn decode_answer(bytes: &[u8], patterns: &[String]) -> Result<Allocations, DecodeError> {
    let mut b = Builder::new(patterns);
    each_field(bytes, &[ANSWER_PODS], |_, pod| read_pod(pod, &mut b))?;
    Ok(b.finish())
}

/// Call `visit(tag, value)` for each length-delimited field of `msg` whose tag is in `known`
/// (strings and messages, the only fields read); skip every other field, as prost skips
/// unknown ones. A field of `known` with another wire type is an error, as in prost.
fn each_field<'a>(
    mut msg: &'a [u8],
    known: &[u32],
    mut visit: impl FnMut(u32, &'a [u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    while msg.has_remaining() {
        let (tag, wire_type) = decode_key(&mut msg).map_err(|e| e.to_string())?;
        if !known.contains(&tag) {
            skip_field(wire_type, tag, &mut msg, DecodeContext::default())
                .map_err(|e| e.to_string())?;
            continue;
        }
        if wire_type != WireType::LengthDelimited {
            return Err(format!(
                "field {tag}: wire type {wire_type:?}, not length-delimited"
            ));
        }
        let len = decode_varint(&mut msg).map_err(|e| e.to_string())?;
        let len = usize::try_from(len)
            .ok()
            .filter(|l| *l <= msg.len())
            .ok_or_else(|| format!("field {tag}: {len} bytes, past the end"))?;
        let (value, rest) = msg.split_at(len);
        msg = rest;
        visit(tag, value)?;
    }
    Ok(())
}

/// A string field's value.
fn text(value: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(value).map_err(|e| format!("a string that is not UTF-8: {e}"))
}

/// The last value of the string field `tag` of `msg` ("" when absent), as prost keeps it;
/// the other known fields are only checked to be length-delimited.
fn last_text<'a>(msg: &'a [u8], known: &[u32], tag: u32) -> Result<&'a str, DecodeError> {
    let mut last = "";
    each_field(msg, known, |t, v| {
        if t == tag {
            last = text(v)?;
        }
        Ok(())
    })?;
    Ok(last)
}

/// One `PodResources`: each container, in order, with the pod's name and namespace.
fn read_pod(pod: &[u8], b: &mut Builder<'_>) -> Result<(), DecodeError> {
    let mut name = "";
    let mut namespace = "";
    each_field(pod, &POD, |tag, v| {
        match tag {
            1 => name = text(v)?,
            2 => namespace = text(v)?,
            _ => {}
        }
        Ok(())
    })?;
    each_field(pod, &POD, |tag, v| {
        if tag == 3 {
            read_container(v, name, namespace, b)?;
        }
        Ok(())
    })
}

/// Whether every resource name of a container's devices (field 2) and driver name of its
/// claims (field 5) fits; checks those strings are UTF-8.
fn names_fit(container: &[u8]) -> Result<bool, DecodeError> {
    let mut fit = true;
    each_field(container, &CONTAINER, |tag, v| {
        match tag {
            2 => fit &= fits(last_text(v, &DEVICES, 1)?),
            5 => each_field(v, &DYNAMIC, |_, claim| {
                fit &= fits(last_text(claim, &CLAIM, 2)?);
                Ok(())
            })?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(fit)
}

/// One `ContainerResources`: its devices' holders, then its claims', or the container left
/// out (and counted) when a name is over the cap.
fn read_container(
    c: &[u8],
    pod: &str,
    namespace: &str,
    b: &mut Builder<'_>,
) -> Result<(), DecodeError> {
    let name = last_text(c, &CONTAINER, 1)?;
    if !(names_fit(c)? && fits(pod) && fits(namespace) && fits(name)) {
        b.long_names();
        return Ok(());
    }
    let who = Who {
        pod,
        namespace,
        container: name,
    };
    each_field(c, &CONTAINER, |tag, v| {
        if tag == 2 {
            read_devices(v, &who, b)?;
        }
        Ok(())
    })?;
    each_field(c, &CONTAINER, |tag, v| {
        if tag == 5 {
            each_field(v, &DYNAMIC, |_, claim| read_claim(claim, &who, b))?;
        }
        Ok(())
    })
}

/// The container a holder is, borrowed from the answer until a holder is kept.
struct Who<'a> {
    pod: &'a str,
    namespace: &'a str,
    container: &'a str,
}

impl Who<'_> {
    fn holder(&self, resource: String, replica: Option<String>) -> Holder {
        Holder {
            pod: PodRef {
                pod: self.pod.to_string(),
                namespace: Some(self.namespace.to_string()).filter(|n| !n.is_empty()),
                container: Some(self.container.to_string()).filter(|n| !n.is_empty()),
            },
            resource,
            replica,
            labels: Vec::new(),
            owner: None,
        }
    }
}

/// One `ContainerDevices`: a holder of each device id of a GPU resource.
fn read_devices(d: &[u8], who: &Who<'_>, b: &mut Builder<'_>) -> Result<(), DecodeError> {
    let resource = last_text(d, &DEVICES, 1)?;
    let gpu = b.is_gpu_resource(resource);
    each_field(d, &DEVICES, |tag, v| {
        if tag == 2 {
            let id = text(v)?;
            if gpu {
                match parse_device_id(id) {
                    Some((dev, replica)) => {
                        b.add(dev, || who.holder(resource.to_string(), replica))
                    }
                    None => b.unmapped(id),
                }
            } else {
                b.unlisted(id, resource);
            }
        }
        Ok(())
    })
}

/// One `ClaimResource`: a holder of the device it names.
fn read_claim(claim: &[u8], who: &Who<'_>, b: &mut Builder<'_>) -> Result<(), DecodeError> {
    let mut driver = "";
    let mut device = "";
    each_field(claim, &CLAIM, |tag, v| {
        match tag {
            1 => {
                last_text(v, &CDI, 1)?;
            }
            2 => driver = text(v)?,
            4 => device = text(v)?,
            _ => {}
        }
        Ok(())
    })?;
    match dra_device(device, cdi_names(claim)) {
        Some(dev) => b.add(dev, || who.holder(format!("dra:{driver}"), None)),
        None if is_gpu_driver(driver) => b.unmapped(device),
        None => {}
    }
    Ok(())
}

/// The names of a claim's CDI devices, in order (already checked by [`read_claim`]).
fn cdi_names(mut claim: &[u8]) -> impl Iterator<Item = &str> {
    std::iter::from_fn(move || {
        while claim.has_remaining() {
            let (tag, wire_type) = decode_key(&mut claim).ok()?;
            if tag == 1 && wire_type == WireType::LengthDelimited {
                let len = usize::try_from(decode_varint(&mut claim).ok()?).ok()?;
                let (v, rest) = claim.split_at_checked(len)?;
                claim = rest;
                return last_text(v, &CDI, 1).ok();
            }
            skip_field(wire_type, tag, &mut claim, DecodeContext::default()).ok()?;
        }
        None
    })
}

/// A gRPC codec for the PodResources calls: the request `M` encoded by prost, the answer
/// decoded by [`decode_answer`] into [`Allocations`].
#[derive(Debug, Clone)]
pub(crate) struct AnswerCodec<M> {
    patterns: Vec<String>,
    request: PhantomData<fn(M)>,
}

impl<M> AnswerCodec<M> {
    /// A codec for the GPU resource names `patterns`.
    pub(crate) fn new(patterns: &[String]) -> Self {
        AnswerCodec {
            patterns: patterns.to_vec(),
            request: PhantomData,
        }
    }
}

/// The request's encoder.
#[derive(Debug)]
pub(crate) struct RequestEncoder<M>(PhantomData<fn(M)>);

impl<M: prost::Message> tonic::codec::Encoder for RequestEncoder<M> {
    type Item = M;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: M,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(format!("cannot encode the request: {e}")))
    }
}

/// The answer's decoder.
#[derive(Debug)]
pub(crate) struct AnswerDecoder {
    patterns: Vec<String>,
}

impl tonic::codec::Decoder for AnswerDecoder {
    type Item = Allocations;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Allocations>, tonic::Status> {
        // The message is whole in tonic's buffer: taken without a copy.
        let bytes = src.copy_to_bytes(src.remaining());
        decode_answer(&bytes, &self.patterns)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("cannot decode the answer: {e}")))
    }
}

impl<M: prost::Message + Send + 'static> tonic::codec::Codec for AnswerCodec<M> {
    type Encode = M;
    type Decode = Allocations;
    type Encoder = RequestEncoder<M>;
    type Decoder = AnswerDecoder;

    fn encoder(&mut self) -> RequestEncoder<M> {
        RequestEncoder(PhantomData)
    }

    fn decoder(&mut self) -> AnswerDecoder {
        AnswerDecoder {
            patterns: self.patterns.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::kubelet::proto::*;
    use crate::attribution::kubelet::tests::container;
    use crate::bounds::{MAX_ENTITIES, MAX_HOLDERS, MAX_LABEL_BYTES};
    use crate::pipeline::Answer as _;
    use prost::Message as _;

    fn patterns() -> Vec<String> {
        vec!["nvidia.com/gpu*".into(), "nvidia.com/mig-*".into()]
    }

    fn pod(name: &str, namespace: &str, containers: Vec<ContainerResources>) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: namespace.into(),
            containers,
        }
    }

    fn claimed() -> ContainerResources {
        let claim = |device: &str, cdi: &[&str]| ClaimResource {
            cdi_devices: cdi
                .iter()
                .map(|n| CdiDevice { name: (*n).into() })
                .collect(),
            driver_name: "gpu.nvidia.com".into(),
            pool_name: "node-1".into(),
            device_name: device.into(),
        };
        ContainerResources {
            name: "c".into(),
            dynamic_resources: vec![DynamicResource {
                claim_name: "gpus".into(),
                claim_namespace: "dra".into(),
                claim_resources: vec![
                    claim("gpu-4", &[]),
                    claim("gpu-x", &["k8s.gpu.nvidia.com/gpu=GPU-f00d"]),
                    claim("", &["nvidia.com/gpu=MIG-beef", "other=gpu-7"]),
                ],
            }],
            // Read before the claims, whatever the order on the wire.
            devices: vec![ContainerDevices {
                resource_name: "nvidia.com/gpu".into(),
                device_ids: vec!["5".into()],
                topology: Some(TopologyInfo {
                    nodes: vec![NumaNode { id: 1 }],
                }),
            }],
            cpu_ids: vec![1, 2, 3],
            memory: vec![ContainerMemory {
                memory_type: "memory".into(),
                size: 1 << 30,
                topology: None,
            }],
        }
    }

    /// An answer with every kind of entry: exclusive, time-sliced, MIG, not a GPU, DRA, a
    /// container over the name cap, empty pods and containers.
    fn answer() -> ListPodResourcesResponse {
        ListPodResourcesResponse {
            pod_resources: vec![
                pod(
                    "train",
                    "ml",
                    vec![container("cuda", "nvidia.com/gpu", &["GPU-a"])],
                ),
                pod(
                    "chat-1",
                    "web",
                    vec![container("vllm", "nvidia.com/gpu.shared", &["GPU-b::0"])],
                ),
                pod(
                    "chat-2",
                    "web",
                    vec![
                        container("vllm", "nvidia.com/gpu.shared", &["GPU-b::1", "", "x"]),
                        container("side", "example.com/fpga", &["GPU-c"]),
                        ContainerResources::default(),
                    ],
                ),
                pod(
                    "slice",
                    "",
                    vec![container("", "nvidia.com/mig-1g.10gb", &["MIG-m1"])],
                ),
                pod("claimed", "dra", vec![claimed()]),
                pod(
                    "long",
                    "web",
                    vec![container(
                        "c",
                        &"nvidia.com/gpu".repeat(MAX_LABEL_BYTES),
                        &["0"],
                    )],
                ),
                PodResources::default(),
            ],
        }
    }

    /// A normal answer decodes to what the generated structs gave, `List` and `Get` alike.
    #[test]
    fn an_answer_decodes_as_from_the_generated_structs() {
        let r = answer();
        let a = decode_answer(&r.encode_to_vec(), &patterns()).unwrap();
        assert_eq!(a, Allocations::from_response(&r, &patterns()));
        assert_eq!(a.devices_held(), 7, "{a:?}");
        assert_eq!(
            a.left_out().expect("the long name").to_string(),
            "over limit: the kubelet's pod resources: left out 1 containers whose pod, namespace, container or resource name is over 1024 bytes (the reader's caps bound its memory; see docs/reliability.md)"
        );
        for p in r.pod_resources {
            let get = GetPodResourcesResponse {
                pod_resources: Some(p.clone()),
            };
            let one = ListPodResourcesResponse {
                pod_resources: vec![p],
            };
            assert_eq!(
                decode_answer(&get.encode_to_vec(), &patterns()).unwrap(),
                Allocations::from_response(&one, &patterns())
            );
        }
        let empty = decode_answer(&[], &patterns()).unwrap();
        assert_eq!(empty.devices_held(), 0);
        assert!(empty.left_out().is_none());
    }

    /// Past the caps, holders and devices are left out and counted exactly, as before.
    #[test]
    fn caps_leave_out_and_count_exactly() {
        let mut pods: Vec<PodResources> = (0..MAX_HOLDERS + 44)
            .map(|i| {
                let c = container("c", "nvidia.com/gpu.shared", &[&format!("GPU-b::{i}")]);
                pod(&format!("slice-{i}"), "web", vec![c])
            })
            .collect();
        let ids: Vec<String> = (0..MAX_ENTITIES + 10).map(|i| format!("GPU-{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        pods.push(pod(
            "many",
            "web",
            vec![container("c", "nvidia.com/gpu", &ids)],
        ));
        let r = ListPodResourcesResponse {
            pod_resources: pods,
        };
        let a = decode_answer(&r.encode_to_vec(), &patterns()).unwrap();
        assert_eq!(a, Allocations::from_response(&r, &patterns()));
        assert_eq!(a.devices_held(), MAX_ENTITIES);
        assert_eq!(
            a.left_out().expect("counted").to_string(),
            "over limit: the kubelet's pod resources: left out 11 devices past the first 1024, 44 holders past 256 of one device (the reader's caps bound its memory; see docs/reliability.md)"
        );
    }

    /// Each cut of an answer, and garbage, is an error or the same allocations as prost
    /// reads: never a panic.
    #[test]
    fn truncated_or_garbage_bytes_are_errors() {
        let bytes = answer().encode_to_vec();
        let mut errors = 0;
        for cut in 0..bytes.len() {
            let ours = decode_answer(&bytes[..cut], &patterns());
            match ListPodResourcesResponse::decode(&bytes[..cut]) {
                Ok(r) => assert_eq!(ours, Ok(Allocations::from_response(&r, &patterns()))),
                Err(_) => {
                    assert!(ours.is_err(), "cut at {cut}");
                    errors += 1;
                }
            }
        }
        assert!(errors > bytes.len() / 2, "{errors} errors");
        // A name that is not UTF-8, a name of the wrong wire type, a length past the end.
        for bad in [
            &[0x0a, 0x03, 0x0a, 0x01, 0xff][..],
            &[0x0a, 0x02, 0x08, 0x01],
            &[0x0a, 0x05, 0x0a, 0x01],
            &[
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            &[0x00],
            &[0x0f],
        ] {
            assert!(decode_answer(bad, &patterns()).is_err(), "{bad:?}");
            assert!(ListPodResourcesResponse::decode(bad).is_err(), "{bad:?}");
        }
        // Garbage: a fixed pseudo-random stream, with and without a valid start.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for n in 0..2000 {
            let mut g: Vec<u8> = (0..n % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()[0]
                })
                .collect();
            if n % 2 == 0 {
                g.splice(0..0, bytes[..n % bytes.len()].iter().copied());
            }
            let ours = decode_answer(&g, &patterns());
            if let Ok(r) = ListPodResourcesResponse::decode(g.as_slice()) {
                assert_eq!(ours, Ok(Allocations::from_response(&r, &patterns())));
            }
        }
    }

    /// What costs most once decoded into structs (empty containers, empty device ids, 2
    /// bytes each on the wire) builds nothing here.
    #[test]
    fn empty_entries_build_nothing() {
        let mut empty = container("c", "nvidia.com/gpu", &[]);
        empty.devices[0].device_ids = vec![String::new(); 100_000];
        let mut containers = vec![ContainerResources::default(); 100_000];
        containers.push(empty);
        let r = ListPodResourcesResponse {
            pod_resources: vec![pod("p", "n", containers)],
        };
        let a = decode_answer(&r.encode_to_vec(), &patterns()).unwrap();
        assert_eq!(a.devices_held(), 0);
        assert!(a.left_out().is_none());
    }
}
